"""Red-flag rules on clause variants of a software company's click-through forms: courts of a county named in lower
case, a carve-out "with the exception of" indemnification obligations, a right to end the agreement on notice alone,
a renewal that points to its termination clause, the side defined as whoever accepts the form, a finance charge per
month and a free assignment set as the proviso to a consent requirement. Snippets written for these tests."""

from __future__ import annotations

from agentctx.agents.risk_rules import evaluate_rules


def _spans(*sentences: str, sep: str = " "):
    text = sep.join(sentences)
    spans, pos = [], 0
    for s in sentences:
        spans.append((pos, pos + len(s)))
        pos += len(s) + len(sep)
    return text, spans


def test_courts_of_a_county_in_lower_case_are_compared_by_their_state():
    text, spans = _spans("This Agreement shall be governed by the laws of the State of Oregon.",
                         "The parties consent to the exclusive jurisdiction of the courts of Lane county, Oregon.")
    hits = evaluate_rules("governing_law", text, spans)
    assert [(h.rule, h.severity) for h in hits] == [("governing_law_venue", "low")]
    assert "Lane county, Oregon" in hits[0].rationale


def test_a_carve_out_with_the_exception_of_indemnification_obligations_is_high():
    text, spans = _spans("WITH THE EXCEPTION OF THE CLUB'S INDEMNIFICATION OBLIGATIONS UNDER SECTION 7, THE TOTAL "
                         "LIABILITY OF EACH SIDE SHALL BE LIMITED TO TWO HUNDRED U.S. DOLLARS.")
    hits = evaluate_rules("liability_cap", text, spans)
    assert [(h.rule, h.severity) for h in hits] == [("liability_carve_out", "high")]


def test_a_right_to_end_the_agreement_on_notice_alone_is_without_cause():
    text, spans = _spans("After the first year, either party may terminate this Agreement upon ninety (90) days' "
                         "prior written notice to the other party.")
    hits = evaluate_rules("termination", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [
        ("termination_for_convenience", "low", 90)]
    text, spans = _spans("Either party may end this agreement on six months' notice.")
    hits = evaluate_rules("termination", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [
        ("termination_for_convenience", "low", 180)]
    # a cause named in the sentence is a ground, not a right without one
    text, spans = _spans("Either party may terminate this Agreement upon thirty (30) days' written notice if the "
                         "other party materially breaches it.")
    assert evaluate_rules("termination", text, spans) == []


def test_a_renewal_that_points_to_its_termination_clause_reads_the_window_there():
    text, spans = _spans("The first term is one year. After it, this Agreement shall automatically renew for "
                         "successive one (1) year periods unless terminated as described below.",
                         "Either party may terminate this Agreement upon forty-five (45) days' prior written notice.",
                         sep="\n\n")
    hits = evaluate_rules("term", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [("automatic_renewal", "medium", 45)]
    assert "45 days' notice to terminate" in hits[0].rationale


def test_a_renewal_without_automatically_and_its_non_renewal_notice_any_time_before_the_end():
    text, spans = _spans("Memberships shall renew for successive terms of the same length unless either party gives "
                         "notice of its intention not to renew prior to the expiration of the current term.")
    hits = evaluate_rules("term", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [("automatic_renewal", "medium", 0)]
    assert "any time before the term ends" in hits[0].rationale
    text, spans = _spans("Each Membership Term will renew for successive periods unless either party notifies the "
                         "other of non-renewal at least 75 days prior to the end of the current term.")
    hits = evaluate_rules("term", text, spans)
    assert [(h.rule, h.severity, h.facts["notice_days"]) for h in hits] == [("automatic_renewal", "high", 75)]


def test_the_side_defined_as_whoever_accepts_the_form_is_the_readers_own():
    text, spans = _spans("This Club Agreement is between Toolmaker Inc. (\"Toolmaker\") and the club signing or "
                         "electronically accepting this Agreement (\"Club\").",
                         "Club will indemnify, defend and hold harmless Toolmaker from any claims arising from the "
                         "Club's use of the Tools.")
    hits = evaluate_rules("indemnity", text, spans[1:])
    assert [(h.rule, h.severity) for h in hits] == [("one_sided_indemnity", "high")]


def test_a_finance_charge_on_unpaid_fees_per_month_is_late_interest():
    text, spans = _spans("Any unpaid Fees are subject to a finance charge of two percent (2.0%) per month.")
    hits = evaluate_rules("payment", text, spans)
    assert [(h.rule, h.severity, h.facts["yearly_percent"]) for h in hits] == [("late_payment_interest", "high", 24.0)]
    assert "2.0% per month" in hits[0].rationale


def test_a_free_assignment_set_as_the_proviso_to_consent_is_without_consent():
    text, spans = _spans("This Agreement is not assignable by either party without the other party's prior written "
                         "consent; provided that either party may assign this Agreement to a successor in the event "
                         "of a sale of all, or substantially all, of its business.")
    hits = evaluate_rules("assignment", text, spans)
    assert [(h.rule, h.severity) for h in hits] == [("assignment_change_of_control", "high")]
    text, spans = _spans("Neither party may assign this Agreement without the other party's prior written consent, "
                         "including on a sale of all or substantially all of its business.")
    assert evaluate_rules("assignment", text, spans) == []
