"""Red-flag rules on clause variants of filed agreements: an indemnity promised with a list of verbs, a notice period
written without its unit, a renewal stopped by a notice in the next sentence, a venue stated in an arbitration
clause and a law named by a defined term. Snippets written for these tests."""

from __future__ import annotations

from agentctx.agents.review_steps import rule_risks
from agentctx.agents.risk_rules import evaluate_rules
from agentctx.retrieval.structure import parse_structure


def _spans(*sentences: str):
    text = " ".join(sentences)
    spans, pos = [], 0
    for s in sentences:
        spans.append((pos, pos + len(s)))
        pos += len(s) + 1
    return text, spans


def test_an_indemnity_promised_with_a_list_of_verbs_names_its_indemnifier():
    text, spans = _spans("ATHLETE agrees to protect, indemnify and hold MAKER harmless from all claims arising "
                         "from a breach by ATHLETE.",
                         "MAKER agrees to defend, indemnify and hold harmless ATHLETE from all claims for defects "
                         "in the goods.")
    assert evaluate_rules("indemnity", text, spans) == []
    text, spans = _spans("MAKER agrees to defend, indemnify and hold harmless ATHLETE from all claims for defects "
                         "in the goods.")
    assert [h.rule for h in evaluate_rules("indemnity", text, spans)] == ["one_sided_indemnity"]


def test_termination_for_non_cause_with_a_notice_written_without_days():
    text, spans = _spans("Either Party may end this agreement early as set out below.",
                         "Either Party may terminate this agreement for non-cause with a ninety (90) written notice.")
    hits = evaluate_rules("termination", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [
        ("termination_for_convenience", "low", 90)]


def test_a_renewal_stopped_by_a_notice_in_the_next_sentence_states_it():
    text = ("1.3 Renewal. This agreement will be automatically renewed at the end of every five (5) year term. "
            "A three (3) months notice must be given by either party of its intention to terminate the agreement.\n")
    st = parse_structure(text)
    spans = [(u.start, u.end) for u in st.units]
    (h,) = evaluate_rules("term", text, spans)
    assert h.rule == "automatic_renewal" and h.severity == "high" and h.facts["notice_days"] == 90
    assert "three (3) months' notice to terminate" in h.rationale
    short = text.replace("A three (3) months notice", "A thirty (30) days notice")
    (h,) = evaluate_rules("term", short, [(u.start, u.end) for u in parse_structure(short).units])
    assert h.severity == "medium" and h.facts["notice_days"] == 30


def test_the_venue_of_an_arbitration_clause_is_read_with_the_law():
    text = ("25. GOVERNING LAW\n\nThis Agreement shall be governed by the laws of the State of Ohio.\n\n"
            "26. NOTICES\n\nNotices are given in writing.\n\n"
            "27. ARBITRATION\n\nAny dispute shall be settled by arbitration under the rules of the chosen "
            "association. Venue shall be Ohio.\n")
    st = parse_structure(text)
    start = text.index("This Agreement shall be governed")
    ((h,),) = rule_risks(st, text, "governing_law", start)
    assert h.severity == "low" and h.rationale == ("Governing law and venue: the laws of the State of Ohio, "
                                                   "disputes to arbitration in Ohio.")
    moved = text.replace("Venue shall be Ohio.", "Venue shall be Texas.")
    ((h,),) = rule_risks(parse_structure(moved), moved, "governing_law", start)
    assert h.severity == "medium" and "arbitration in Texas" in h.rationale


def test_a_law_named_by_a_defined_term_is_read_from_its_definition():
    text, spans = _spans("This Agreement is governed by the Governing Law, whatever the rules of conflict of laws.")
    defined = '"Governing Law" means the laws of the State of Ohio.\n' + text
    shift = len(defined) - len(text)
    (h,) = evaluate_rules("governing_law", defined, [(s + shift, e + shift) for s, e in spans])
    assert h.severity == "low" and "the State of Ohio (\u201cGoverning Law\u201d, as defined)" in h.rationale
    (h,) = evaluate_rules("governing_law", text, spans)  # not defined in the text: set by reference
    assert h.facts.get("by_reference")


def test_courts_named_by_a_defined_term_left_blank_are_set_by_reference_not_compared():
    """"submits to the personal jurisdiction of the Dispute Forum Jurisdiction", a term defined as a blank: the forum
    is set by reference (not "no venue named", and no mismatch with the law's state)."""
    text, spans = _spans("This Agreement is governed by the Governing Law.",
                         "Each party submits to the personal jurisdiction of the Dispute Forum Jurisdiction.")
    defined = ('"Governing Law" means the laws of the State of Ohio.\n'
               '"Dispute Forum Jurisdiction" means the state courts located in ________.\n')
    shift = len(defined)
    (h,) = evaluate_rules("governing_law", defined + text, [(s + shift, e + shift) for s, e in spans])
    assert h.severity == "low" and h.facts.get("by_reference")
    assert h.rationale.startswith("Governing law and venue: the laws of the State of Ohio (\u201cGoverning Law\u201d, "
                                  "as defined); the forum is set by reference (\u201cDispute Forum Jurisdiction\u201d)")
