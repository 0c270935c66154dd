from agentctx.citations import locate_quote

TEXT = "1.1 The Vendor shall deliver the goods.\n1.2 Either Party may terminate this\nAgreement on 30 days' notice."


def test_exact_quote_is_verified_with_exact_span():
    q = "Either Party may terminate this"
    s, e, ok = locate_quote(TEXT, q)
    assert ok and TEXT[s:e] == q


def test_whitespace_and_case_differences_still_verify():
    s, e, ok = locate_quote(TEXT, '"either party may terminate this agreement on 30 days\' notice."')
    assert ok and TEXT[s:e].startswith("Either Party") and TEXT[s:e].endswith("notice")


def test_paraphrase_is_unverified_and_too_short_is_none():
    found = locate_quote(TEXT, "The supplier can end the contract with a month of warning")
    assert found is None or found[2] is False
    assert locate_quote(TEXT, "goods") is None


def test_hint_window_prefers_later_occurrence():
    text = "The fee is due. " * 3 + "ZZZ The fee is due monthly."
    s, _, ok = locate_quote(text, "The fee is due", hint_start=text.index("ZZZ"))
    assert ok and s == text.index("ZZZ") + 4
