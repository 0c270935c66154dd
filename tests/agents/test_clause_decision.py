"""Clause candidates and the absence decision, without a model: structure + lexicon on real text."""

from __future__ import annotations

from pathlib import Path

from agentctx.agents import CLAUSE_KINDS
from agentctx.agents.clause_candidates import draw_candidates, resolve_finding_conflicts, rules_only
from agentctx.citations import Citation
from agentctx.findings import ClauseFinding
from agentctx.retrieval.structure import parse_structure

ROOT = Path(__file__).resolve().parents[2]
DEVSET = ROOT / "bench" / "devsets" / "contracts"
SAMPLE = ROOT / "agentctx" / "samples" / "sample_contract.txt"


def _quote(st, c) -> str:
    return " ".join(st.text[c.start:c.end].split())


def test_absent_kinds_are_not_found_and_say_what_was_searched():
    # The PSF licence has no governing law, payment, term, indemnity, confidentiality or assignment clause.
    st = parse_structure((DEVSET / "python_psf_license.txt").read_text())
    for kind in ("governing_law", "payment", "term", "indemnity", "confidentiality", "assignment"):
        dec = draw_candidates(st, kind)
        assert not dec.found, (kind, dec.best)
        assert dec.sections_searched == []  # no heading names it either
    # ... but it has a termination and a limitation of liability, in numbered paragraphs without titles.
    term = draw_candidates(st, "termination")
    assert term.found and term.best.section_name == "6."
    assert _quote(st, term.best).startswith("This License Agreement will automatically terminate upon a material")


def test_a_notice_without_parties_or_termination():
    st = parse_structure((DEVSET / "python_cwi_license.txt").read_text())
    chosen = rules_only(st, CLAUSE_KINDS)
    assert {k for k, c in chosen.items() if c is not None} == {"liability_cap"}
    assert _quote(st, chosen["liability_cap"]).startswith("STICHTING MATHEMATISCH CENTRUM DISCLAIMS ALL WARRANTIES")


def test_headings_weigh_more_than_body_words_and_quotes_are_operative_sentences():
    st = parse_structure(SAMPLE.read_text())
    chosen = rules_only(st, CLAUSE_KINDS)
    # Parties come from the preamble, not from "1.1 The Parties intend that ...".
    assert chosen["parties"].section_name == "preamble"
    assert _quote(st, chosen["parties"]).startswith("This Master Services Agreement is made on September 19, 2022 "
                                                    "between Summitbridge Staffing Corp")
    # The governing law is the sentence that names the law, under its heading; not "organised under the laws
    # of the State of Illinois" (1.2) nor the subcontractor's disputes (43.1).
    assert chosen["governing_law"].section_name == "ARTICLE 21. GOVERNING LAW > 21.4"
    assert _quote(st, chosen["governing_law"]).endswith("governed by the laws of the State of New York.")
    # The cap, not its exception (11.2) nor the duty to mitigate (11.3).
    assert _quote(st, chosen["liability_cap"]) == ("Subject to Section 16.8, each Party's total liability is capped "
                                                   "at the amount stated in this Schedule.")
    # Assignment is in its article, not "Vendor shall assign the Key Personnel" (35.1).
    assert chosen["assignment"].section_name.startswith("ARTICLE 17. ASSIGNMENT AND SUBCONTRACTING")
    for kind, c in chosen.items():
        q = _quote(st, c)
        assert q[0].isupper() and q.endswith("."), (kind, q)  # whole sentences, no clause number


def test_survival_of_termination_is_not_the_termination_clause():
    text = ("5. Term and Termination\n\n"
            "5.1 This Agreement continues until terminated under this Section 5.\n"
            "5.2 Either party may terminate this Agreement on thirty (30) days' written notice.\n\n"
            "9. General\n\n"
            "9.1 Sections 4 and 6 survive any expiration or termination of this Agreement.\n")
    st = parse_structure(text)
    dec = draw_candidates(st, "termination")
    assert dec.found and _quote(st, dec.best) == ("Either party may terminate this Agreement on thirty (30) days' "
                                                  "written notice.")
    survival = [c for c in dec.candidates if "survive" in _quote(st, c)]
    assert all(c.score < dec.threshold for c in survival)


def test_a_sentence_that_opens_with_a_connective_is_quoted_with_the_one_before():
    text = ("7. Assignment. Neither party may assign this Agreement without the other party's prior written "
            "consent. However, either party may assign this Agreement to a successor to all of its business.\n")
    st = parse_structure(text)
    dec = draw_candidates(st, "assignment")
    best = dec.best
    assert _quote(st, best).startswith("Neither party may assign") and _quote(st, best).endswith("of its business.")


def _finding(kind, span, score, candidates, text):
    return ClauseFinding(kind=kind, present=True, quote=text[span[0]:span[1]], score=score, threshold=1.0,
                         citation=Citation(page=0, char_start=span[0], char_end=span[1], quote=text[span[0]:span[1]],
                                           verified=True), candidates=candidates, chosen_by="rules")


def test_one_sentence_is_not_cited_for_two_kinds_it_does_not_carry():
    text = ("1.1 This Agreement is governed by the laws of Ireland. 1.2 Neither party may assign this Agreement "
            "without consent.")
    law = (4, 54)
    assign = (59, len(text))

    def cand(span, score):
        return {"char_start": span[0], "char_end": span[1], "unit_start": span[0], "unit_end": span[1],
                "section": "1", "score": score, "body_score": 2.0}

    def cite(a, b):
        return Citation(page=0, char_start=a, char_end=b, quote=text[a:b], verified=True)

    findings = [_finding("governing_law", law, 4.0, [cand(law, 4.0)], text),
                _finding("assignment", law, 1.2, [cand(law, 1.2), cand(assign, 1.1)], text),
                _finding("term", law, 1.0, [cand(law, 1.0)], text)]
    out = resolve_finding_conflicts(findings, text, cite)
    assert out[0].citation.char_start == law[0]  # the law sentence stays with governing_law
    assert (out[1].citation.char_start, out[1].citation.char_end) == assign  # assignment falls back
    assert not out[2].present and "carries governing_law" in out[2].note  # term has nowhere to go


def test_technical_text_beside_an_agreement_carries_no_clause():
    """A case file may hold a manual beside its agreements: a kind's words without a contract's voice,
    under no legal heading, are not a clause; the same words in a contract's voice are."""
    manual = ("Running the daemon\n\nIf a second instance has taken over the socket, the daemon will then "
              "terminate itself. The timeout value is capped at 60 seconds. The cache continues until the next "
              "restart.\n")
    chosen = rules_only(parse_structure(manual), ("termination", "liability_cap", "term"))
    assert chosen == {"termination": None, "liability_cap": None, "term": None}
    contract = manual + ("\nEither party may terminate this Agreement on thirty days' written notice to the "
                         "other party.\n")
    found = rules_only(parse_structure(contract), ("termination",))["termination"]
    assert found is not None and "terminate this Agreement" in contract[found.start:found.end]


def test_a_kind_is_found_when_a_lower_candidate_qualifies_behind_a_heading_only_one():
    # Synthetic. The "Assignment" heading lifts a related provision (successors and assigns) above the
    # restriction, which sits under "General": the decision reads the best few candidates, not the first.
    text = ("1. Assignment\n\nThis Agreement binds the parties and their successors and assigns.\n\n"
            "2. General\n\nThis Agreement is not assignable by Customer.\n")
    st = parse_structure(text)
    dec = draw_candidates(st, "assignment")
    assert not dec.qualifies(dec.best) and dec.best.section_name == "1. Assignment"
    assert dec.found and _quote(st, dec.pick) == "This Agreement is not assignable by Customer."
    assert _quote(st, rules_only(st, ["assignment"])["assignment"]) == "This Agreement is not assignable by Customer."


def test_a_sections_qualifying_sentence_stands_for_it_before_a_higher_related_one():
    # Synthetic. Retrieval's bonus lifts the procedure above the duty in the same section; the section's
    # candidate is still the sentence that qualifies.
    text = ("7. Indemnification\n\nSupplier will indemnify Buyer against third-party claims.\n"
            "The indemnified party will give notice of a claim to the other party.\n")
    st = parse_structure(text)
    duty, notice = st.units[0], st.units[1]
    dec = draw_candidates(st, "indemnity", boost={notice.start: 5.0})
    assert len(dec.candidates) == 1 and dec.candidates[0].unit_start == duty.start and dec.found


def test_a_qualifying_candidate_below_the_decision_depth_is_not_read():
    text = "".join(f"{i}. Assignment\n\nThis Agreement binds the parties and their successors and assigns.\n\n"
                   for i in range(1, 5)) + "9. General\n\nThis Agreement is not assignable by Customer.\n"
    dec = draw_candidates(parse_structure(text), "assignment")
    assert [dec.qualifies(c) for c in dec.candidates] == [False, False, False, False, True]
    assert not dec.found and dec.pick is None
