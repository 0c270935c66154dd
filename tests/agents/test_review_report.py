"""The review report's notes: a warning when every risk got the same severity."""

from agentctx.findings import RiskFinding
from agentctx.pipelines.report import ReviewDocument, ReviewReport, severity_note
from agentctx.pipelines.report_html import render_html


def _risk(kind, severity, p):
    probs = {s: (p if s == severity else (1 - p) / 2) for s in ("low", "medium", "high")}
    return RiskFinding(clause_kind=kind, severity=severity, rationale="r", recommendation="c", severity_probs=probs)


def test_all_alike_severities_get_a_note_with_their_mean_probability():
    risks = [_risk("a", "high", 0.5), _risk("b", "high", 0.7), _risk("c", "high", 0.9)]
    note = severity_note(risks)
    assert note.startswith("all 3 risks were rated 'high'; mean probability of 'high' 0.70")
    assert "unranked" in note


def test_mixed_or_few_severities_get_none():
    assert severity_note([_risk("a", "high", 0.5), _risk("b", "low", 0.6), _risk("c", "high", 0.9)]) is None
    assert severity_note([_risk("a", "high", 0.5), _risk("b", "high", 0.6)]) is None  # too few to say
    assert severity_note([]) is None


def test_findings_without_probabilities_still_get_the_note():
    risks = [RiskFinding(clause_kind=k, severity="low", rationale="", recommendation="") for k in "abc"]
    assert severity_note(risks) == ("all 3 risks were rated 'low': on this document the model's severity does "
                                    "not tell the clauses apart, so treat it as unranked and read each clause")


def test_html_shows_the_note_and_each_choices_probability():
    risks = [_risk("a", "high", 0.5), _risk("b", "high", 0.7), _risk("c", "high", 0.9)]
    doc = ReviewDocument(source="x", context_id="c", num_tokens=1, num_pages=1, page_size=256)
    report = ReviewReport(document=doc, risks=risks, notes=[severity_note(risks)])
    html = render_html(report, "text")
    assert "Note: all 3 risks were rated &#x27;high&#x27;" in html or "Note: all 3 risks were rated 'high'" in html
    assert "high 0.70" in html and "high 0.90" in html


# ---------------------------------------------------------------- the HTML page: run table, anchors
import re  # noqa: E402

from agentctx.citations import Citation  # noqa: E402
from agentctx.findings import ClauseFinding, SectionSummary  # noqa: E402

TEXT = ("1.1 This Agreement is governed by the laws of Ireland. 1.2 Neither party may assign this Agreement "
        "without consent. 1.3 Either party may terminate for convenience on 10 days' notice.")


def _cite(sub: str) -> Citation:
    a = TEXT.index(sub)
    return Citation(page=0, char_start=a, char_end=a + len(sub), quote=sub, verified=True)


def _report() -> ReviewReport:
    law = _cite("This Agreement is governed by the laws of Ireland.")
    overlap = _cite("governed by the laws of Ireland. 1.2 Neither party")  # overlaps the law sentence
    clauses = [ClauseFinding(kind="governing_law", present=True, quote=law.quote, citation=law, section="1.1"),
               ClauseFinding(kind="assignment", present=True, quote=overlap.quote, citation=overlap),
               ClauseFinding(kind="payment", present=False, threshold=1.0, note="not found: no sentence carries it",
                             searched={"query": "fees payable", "sections_with_matching_headings": [],
                                       "retrieved_pages": [0], "sentences_scored": 3})]
    risk = RiskFinding(clause_kind="termination", severity="high", rule="termination_for_convenience",
                       rationale="A party may end the agreement without cause on 10 days' notice.",
                       recommendation="Ask for at least 60 days' notice.",
                       citation=_cite("Either party may terminate for convenience on 10 days' notice."),
                       severity_probs={"low": 0.2, "medium": 0.3, "high": 0.5}, model_severity="high")
    summary = SectionSummary(section=0, pages=[0], summary="x", citation=law, title="1.", key_sentences=[law])
    stats = {"pipeline_s": 1.5, "step_s": {"clauses": 1.0, "risks": 0.5}, "model_choices": {"asked": 2},
             "clauses_not_found": ["payment"]}
    doc = ReviewDocument(source="t.txt", context_id="c", num_tokens=1, num_pages=1, page_size=256)
    return ReviewReport(document=doc, clauses=clauses, risks=[risk], summary=[summary], stats=stats)


def test_run_table_is_a_table_not_python_dicts():
    html = render_html(_report(), TEXT)
    run = html[html.index("<summary>Run details</summary>"):]
    assert "{'" not in run and "{&#x27;" not in run
    assert "<tr><th>time per step (s)</th><td><table><tr><td>clauses</td><td>1.0</td></tr>" in run
    assert "<th>clauses not found</th><td>payment</td>" in run
    assert "pipeline_s" not in run and "step_s" not in run  # plain-language labels, not raw keys


def test_every_link_lands_on_a_highlighted_span_of_its_quote():
    report = _report()
    html = render_html(report, TEXT)
    links = re.findall(r"href='#([\w-]+)'", html)
    assert {"clause-0", "clause-1", "risk-0", "summary-0-0"} <= set(links)
    source = html[html.index("<div id='source'>"):]
    ids = re.findall(r'id="([\w-]+)"', source)
    assert len(ids) == len(set(ids))  # one anchor per span
    for link in links:
        assert link in ids, link
        # the anchor is a <mark> holding the first characters of the cited text (never an empty anchor)
        m = re.search(rf'<mark id="{link}"[^>]*>(?:<mark[^>]*>)*([^<]+)', source)
        assert m and m.group(1).strip(), link
    # overlapping quotes: the second starts inside the first and still gets its own mark
    m = re.search(r'<mark id="clause-1"[^>]*>(?:<mark[^>]*>)*([^<]+)', source)
    assert m.group(1).startswith("governed by the laws of Ireland.")


def test_not_found_kinds_say_so_with_what_was_searched():
    html = render_html(_report(), TEXT)
    card = html[html.index("<b>payment</b>"):]
    card = card[:card.index("</div>")]
    assert "<i>not found</i>" in card and "no sentence carries it" in card
    assert "query <i>fees payable</i>" in card and "3 sentences scored" in card
    assert "<b>termination</b> &middot; <code>termination_for_convenience</code>" in html
    assert "model&#x27;s severity (secondary): high" in html or "model's severity (secondary): high" in html


def test_a_rule_without_model_severity_does_not_hide_the_note():
    """The model said 'high' for every risk it rated; the missing-cap rule has no evidence and no model
    severity, and must not make the severities look mixed."""
    rated = [_risk(k, "high", 0.6).model_copy(update={"model_severity": "high", "rule": "r"}) for k in "abc"]
    missing = RiskFinding(clause_kind="liability_cap", severity="medium", rationale="r", recommendation="c",
                          rule="no_liability_cap")
    note = severity_note(rated + [missing])
    assert note is not None and "all 3 risks" in note and "'high'" in note


def test_cross_document_notes_count_reviewed_documents_and_skip_placeholder_laws():
    from agentctx.findings import ClauseFinding
    from agentctx.pipelines.report import CaseDocument, cross_document_notes

    docs = [CaseDocument(index=0, name="other text", char_start=0, char_end=10, how="other"),
            CaseDocument(index=1, name="Supply", char_start=10, char_end=20, how="opening"),
            CaseDocument(index=2, name="NDA", char_start=20, char_end=30, how="opening"),
            CaseDocument(index=3, name="Services", char_start=30, char_end=40, how="opening")]
    law = "This Agreement is governed by the laws of the State of {}."
    clauses = [ClauseFinding(kind="governing_law", document=1, present=True, quote=law.format("Oregon")),
               ClauseFinding(kind="governing_law", document=2, present=True, quote=law.format("Governing Law")),
               ClauseFinding(kind="governing_law", document=3, present=True, quote=law.format("Vermont")),
               ClauseFinding(kind="liability_cap", document=1, present=True, quote="x"),
               ClauseFinding(kind="liability_cap", document=2, present=False),
               ClauseFinding(kind="liability_cap", document=3, present=True, quote="y")]
    notes = cross_document_notes(docs, clauses)
    assert notes == ["the documents are governed by different laws: Oregon (Supply); Vermont (Services)",
                     "liability cap found in 2 of 3 documents; not in: NDA"]


def test_case_file_sections_are_numbered_among_the_reviewed_documents():
    """Text before the first agreement is listed but not reviewed: the first agreement is "1.", not "2."."""
    from agentctx.pipelines.report import CaseDocument

    doc = ReviewDocument(source="case.txt", context_id="c", num_tokens=1, num_pages=1, page_size=256)
    docs = [CaseDocument(index=0, name="other text", char_start=0, char_end=10, how="other"),
            CaseDocument(index=1, name="Supply Agreement", char_start=10, char_end=20, how="opening"),
            CaseDocument(index=2, name="Mutual NDA", char_start=20, char_end=30, how="opening")]
    html = render_html(ReviewReport(document=doc, documents=docs), "x" * 30)
    assert "<section id='doc-1'><h2>1. Supply Agreement</h2>" in html
    assert "<section id='doc-2'><h2>2. Mutual NDA</h2>" in html
    assert "href='#doc-1'" in html and "other text (characters 0-10)" in html
