"""The red-flag rules on hand-written clause variants: each rule fires on its red flag, with the
evidence sentence, and stays silent on the safe variant."""

from __future__ import annotations

import pytest

from agentctx.agents.risk_rules import evaluate_rules, no_liability_cap, notice_days


def _hits(kind: str, *sentences: str):
    text = " ".join(sentences)
    spans, pos = [], 0
    for s in sentences:
        spans.append((pos, pos + len(s)))
        pos += len(s) + 1
    return text, evaluate_rules(kind, text, spans)


def _one(kind: str, *sentences: str):
    text, hits = _hits(kind, *sentences)
    assert len(hits) == 1, hits
    h = hits[0]
    return h, text[h.start:h.end] if h.start is not None else None


@pytest.mark.parametrize("text,days", [("on twenty (20) days' notice", 20), ("within 29 days", 29),
                                       ("thirty days after", 30), ("no period", None)])
def test_notice_days(text, days):
    assert notice_days(text) == days


def test_uncapped_and_carved_out_liability():
    h, ev = _one("liability_cap", "Each party's liability under this Agreement is unlimited.")
    assert h.rule == "liability_uncapped" and h.severity == "high" and ev.endswith("is unlimited.")
    h, ev = _one("liability_cap", "Each Party's total liability is capped at the Fees paid.",
                 "The liability cap does not apply to breach of confidentiality or to the indemnities.")
    assert h.rule == "liability_carve_out" and h.severity == "high" and ev.startswith("The liability cap does not")
    h, _ = _one("liability_cap", "Neither Party excludes liability for death or personal injury caused by its "
                                 "negligence, or for fraud.")
    assert h.rule == "liability_carve_out" and h.severity == "low"  # the carve-outs the law requires
    _, hits = _hits("liability_cap", "Each Party's total liability is capped at the Fees paid in the prior year.")
    assert hits == []


def test_missing_cap_is_a_finding_without_evidence_span():
    h = no_liability_cap("ARTICLE 11")
    assert h.rule == "no_liability_cap" and h.start is None and "ARTICLE 11" in h.rationale


def test_one_sided_and_mutual_indemnity():
    h, ev = _one("indemnity", "You agree to indemnify, defend and hold Licensor harmless from any claims.")
    assert h.rule == "one_sided_indemnity" and h.severity == "high" and h.facts["indemnifier"].lower() == "you"
    h, _ = _one("indemnity", "Vendor shall indemnify Client against Losses arising from any Third-Party Claim.")
    assert h.severity == "medium"  # the other side indemnifies you: one-sided, in your favour
    _, hits = _hits("indemnity", "Client shall indemnify Vendor against Losses arising from its materials.",
                    "Vendor shall indemnify Client against Losses arising from any Third-Party Claim.")
    assert hits == []
    _, hits = _hits("indemnity", "Each party shall indemnify the other against third-party claims.")
    assert hits == []


def test_termination_for_convenience_by_notice_period():
    h, ev = _one("termination", "Client may terminate for convenience on 29 days' written notice.")
    assert h.rule == "termination_for_convenience" and h.severity == "high" and h.facts["notice_days"] == 29
    h, _ = _one("termination", "Client may terminate for convenience on written notice.")
    assert h.severity == "high" and h.facts["notice_days"] is None
    h, _ = _one("termination", "Either party may terminate this Agreement for any reason on forty-five (45) "
                               "days' notice.")
    assert h.severity == "medium"
    h, _ = _one("termination", "Customer may terminate this Agreement without cause on ninety (90) days' notice.")
    assert h.severity == "low"
    _, hits = _hits("termination", "Either Party may terminate this Agreement if the other commits a material breach "
                                   "not remedied within thirty (30) days.")
    assert hits == []


def test_automatic_renewal_and_its_notice_window():
    h, ev = _one("term", "Thereafter the Order Form renews automatically for successive periods of 24 months unless "
                         "either Party gives sixty (60) days' notice of non-renewal.")
    assert h.rule == "automatic_renewal" and h.severity == "high"
    assert h.facts == {"notice_days": 60, "period": "24 months"}
    h, _ = _one("term", "The term shall be automatically renewed for one-year periods unless a party gives "
                        "twenty (20) days' notice.")
    assert h.severity == "medium" and h.facts["notice_days"] == 20
    h, _ = _one("term", "This Agreement renews automatically each year.")
    assert h.severity == "high" and "no notice window" in h.rationale
    _, hits = _hits("term", "This Agreement commences on the Effective Date and continues for 12 months.",
                    "Any renewal must be agreed in writing.")
    assert hits == []


def test_payment_term_and_late_interest():
    h, _ = _one("payment", "Undisputed invoices are payable within seven (7) days of receipt.")
    assert h.rule == "short_payment_term" and h.facts["due_days"] == 7
    _, hits = _hits("payment", "Invoices are payable within thirty (30) days of receipt.")
    assert hits == []
    h, _ = _one("payment", "Late payments accrue interest at 1.5 percent per month.")
    assert h.rule == "late_payment_interest" and h.severity == "high" and h.facts["yearly_percent"] == 18.0
    h, _ = _one("payment", "Late payments owed by Client accrue interest at 5.8 percent per annum.")
    assert h.severity == "medium" and h.facts["yearly_percent"] == 5.8
    _, hits = _hits("payment", "Client shall pay the Fees set out in the Order Form.")
    assert hits == []


def test_assignment_on_change_of_control_without_consent():
    h, ev = _one("assignment", "Either party may assign this Agreement without consent to a successor in "
                               "connection with a merger, acquisition or sale of all or substantially all of its "
                               "assets.")
    assert h.rule == "assignment_change_of_control" and h.severity == "high"
    h, _ = _one("assignment", "Client may assign any Order Form to an Affiliate or to a successor to its business "
                              "on notice.")
    assert h.rule == "assignment_change_of_control"
    _, hits = _hits("assignment", "A change of control of Vendor is treated as an assignment for the purposes of this "
                                  "Article.", "Neither party may assign this Agreement without the other's consent.")
    assert hits == []


def test_governing_law_and_venue():
    h, ev = _one("governing_law", "The courts of England and Wales have exclusive jurisdiction.",
                 "This Agreement is governed by the laws of the State of New York.")
    assert h.rule == "governing_law_venue" and h.severity == "medium"
    assert h.facts == {"law": "the State of New York", "venue": "England and Wales"}
    assert ev == "This Agreement is governed by the laws of the State of New York."
    h, _ = _one("governing_law", "This Agreement is governed by the laws of Ireland.",
                "The courts of Ireland have exclusive jurisdiction.")
    assert h.severity == "low" and h.facts == {"law": "Ireland", "venue": "Ireland"}
    _, hits = _hits("governing_law", "Each party shall comply with all applicable export laws.")
    assert hits == []


def test_governing_law_set_by_reference_is_no_mismatch():
    """A standard form names its law and courts by the variables a cover page fills in: two blanks
    are not two different places."""
    h, _ = _one("governing_law", "This Agreement is governed by the laws of the State of Governing Law.",
                "Disputes go exclusively to the courts located in Jurisdiction.")
    assert h.severity == "low" and h.facts["by_reference"] is True
    assert "Governing Law" in h.rationale and "Jurisdiction" in h.rationale
    # a real place beside a blank is not a mismatch either; two real places still are
    h, _ = _one("governing_law", "This Agreement is governed by the laws of Ireland.",
                "Disputes go to the courts located in Jurisdiction.")
    assert h.severity == "low" and h.facts["by_reference"] is True
    h, _ = _one("governing_law", "This Agreement is governed by the laws of the State of Delaware.",
                "Disputes go to the courts located in Texas.")
    assert h.severity == "medium"


def test_rationales_and_recommendations_are_whole_and_distinct():
    text, hits = _hits("payment", "Late payments accrue interest at 2 percent per month.",
                       "Invoices are payable within 10 days.")
    text2, more = _hits("termination", "Client may terminate for convenience on 5 days' notice.")
    for h in hits + more:
        assert h.rationale.endswith(".") and h.recommendation.endswith(".")
        assert h.rationale != h.recommendation


def test_termination_notice_in_the_next_sentence_and_grounds_as_items():
    h, _ = _one("termination", "Either party may terminate this Agreement for any or no reason.",
                "To terminate, the terminating party must give the other party 30 days advance notice.")
    assert h.facts["notice_days"] == 30 and h.severity == "medium" and "30 days" in h.rationale
    h, ev = _one("termination", "Either party may terminate this Agreement:",
                 "a. if the other party materially breaches it and does not cure the breach within 30 days;",
                 "b. if the other party becomes insolvent; or",
                 "c. for any or no reason following 45 days notice.")
    assert h.rule == "termination_for_convenience" and ev.startswith("c. for any") and h.facts["notice_days"] == 45
    _, hits = _hits("termination", "The Licensor may terminate this Agreement:",
                    "a. if the Licensee fails to pay any fee when due; or", "b. if the Licensee becomes insolvent.")
    assert hits == []


def test_renewal_window_set_by_reference_is_not_called_missing():
    h, _ = _one("term", "This Agreement renews automatically for successive one-year terms unless a party gives "
                        "notice of non-renewal before the Non-Renewal Notice Date.")
    assert h.severity == "medium" and "Non-Renewal Notice Date" in h.rationale and "no notice window" not in h.rationale


def test_carve_outs_from_the_damages_waiver_and_defined_uncapped_claims():
    # An exception to the exclusion of indirect damages is not an exception to the cap.
    h, _ = _one("liability_cap", "Under no circumstances will either party be liable to the other for lost profits "
                                 "or indirect damages, except for breaches of its confidentiality obligations.")
    assert h.rule == "liability_carve_out" and h.severity == "medium" and h.facts["from"] == "damages waiver"
    assert "uncapped" not in h.rationale
    # A cap that does not apply to a defined class of claims leaves that class uncapped.
    h, _ = _one("liability_cap", "Section 9.1 (Liability Cap) does not apply to any Excluded Claims.")
    assert h.severity == "high" and h.facts["carve_out"] == "Excluded Claims" and "uncapped" in h.rationale
    h, _ = _one("liability_cap", "Nothing in this Agreement limits either party's liability for fraud or for death "
                                 "caused by negligence.")
    assert h.severity == "low"


def test_termination_as_an_event_or_for_cause_is_no_convenience_right():
    """Issue 31's hand check: survival, the effect of termination, a termination as a condition and a
    ground inside a cause carry the words "for any reason" / "at any time" and grant no right."""
    for clause in ("Upon expiry or termination of this Agreement for any reason, the Buyer will return all samples.",
                   "Clauses 4 and 7 survive the termination of this Agreement for any reason.",
                   "If this Agreement is terminated for any reason, the Reseller will stop selling the Goods.",
                   "The Supplier may end the engagement without notice if the Agent is at any time convicted of "
                   "a crime.",
                   "If either party commits a material breach and fails to cure it, the other party may terminate "
                   "this Agreement by notice at any time."):
        _, hits = _hits("termination", clause)
        assert hits == [], clause


def test_termination_notice_is_read_from_days_tied_to_notice_in_the_same_paragraph():
    # days of another duty are no notice period; the next sentence that terminates on notice gives it
    h, _ = _one("termination", "Either party may terminate this Agreement at any time, and the Agent will be paid "
                               "within 15 days of the termination.",
                "The Principal may terminate by giving 75 days' prior written notice.")
    assert h.facts["notice_days"] == 75 and h.severity == "low"
    # a for-cause right in the next clause does not lend its cure period
    h, _ = _one("termination", "If no Order is open, either party may terminate for any or no reason by notice.",
                "Either party may terminate if the other fails to cure a breach within 45 days after notice.")
    assert h.facts["notice_days"] is None and h.severity == "high"
    h, _ = _one("termination", "The Employer may at its discretion terminate the employment at any time by paying "
                               "salary in lieu of the notice period.")
    assert h.severity == "medium" and "in lieu of notice" in h.rationale


def test_carve_outs_are_read_from_what_is_excepted():
    h, _ = _one("liability_cap", "Save in the case of gross negligence, the Seller is not liable for any direct or "
                                 "indirect damages, including loss of data or goodwill.")
    assert h.severity == "low" and h.rationale.startswith("The limitation of liability excepts gross negligence")
    assert "fraud" not in h.rationale and "death" not in h.rationale
    h, _ = _one("liability_cap", "Clauses 8.1 (Cap) and 8.2 (Waiver) do not apply to Special Claims or Excluded "
                                 "Claims.", "For all Special Claims, each party's liability will not exceed twice "
                                            "the Fees.")
    assert h.facts["carve_out"] == "Special Claims and Excluded Claims" and h.severity == "high"
    assert "Special Claims have a cap of their own" in h.rationale and "Excluded Claims are uncapped" in h.rationale


def test_indemnity_offered_only_with_optional_warranty_and_indemnity_owed_to_us():
    h, _ = _one("indemnity", "You may offer support to others, but only if You agree to indemnify each Author "
                             "against any liability arising from your accepting any such warranty.")
    assert h.severity == "low" and h.facts["opt_in"] is True
    h, _ = _one("indemnity", "The Member agrees to indemnify and hold harmless us and our officers against claims.")
    assert h.severity == "high" and "your side" in h.rationale


def test_renewal_notice_before_a_renewal_and_late_interest_over_a_base_rate():
    h, _ = _one("term", "The subscription will automatically renew for successive one year periods, provided that "
                        "either party may end it by 30 days' written notice prior to the renewal date.")
    assert h.facts["notice_days"] == 30 and "30 days' notice before a renewal" in h.rationale
    h, _ = _one("payment", "Interest accrues on overdue invoices at 4% over the central bank base rate.")
    assert h.rule == "late_payment_interest" and "4% over the central bank base rate" in h.rationale


def test_law_and_venue_named_in_other_ways():
    h, _ = _one("governing_law", "This contract is governed by Irish law and the courts of Ireland decide disputes.")
    assert h.severity == "low" and h.facts["law"] == "Ireland"
    h, _ = _one("governing_law", "This Agreement is governed by the laws of the state of Oregon.",
                "Disputes go to the courts located in Multnomah County, Oregon.")
    assert h.severity == "low" and h.facts["venue"] == "Multnomah County, Oregon"
    h, _ = _one("governing_law", "This Agreement is governed by the laws of the United States and the State of "
                                 "Texas.", "The courts of the State of Texas have exclusive jurisdiction.")
    assert h.severity == "low" and "State of Texas" in h.facts["law"]
    h, _ = _one("governing_law", "This Licence is governed by Dutch law.", "Disputes go to the Utrecht Courts.")
    assert h.severity == "low" and h.facts["venue"] == "Utrecht"


def test_first_person_signer_and_sponsor_indemnify_from_the_readers_side():
    h, _ = _one("indemnity", "I will indemnify the Organiser against any claims arising from my talk.")
    assert h.severity == "high" and "your side (I, the signer)" in h.rationale and "Only i " not in h.rationale
    h, _ = _one("indemnity", "Sponsor shall indemnify the Foundation against claims arising from its booth.")
    assert h.severity == "high" and "your side" in h.rationale
    # a fiscal sponsor is the host of a project, not its paying side
    h, _ = _one("indemnity", "The Fiscal Sponsor shall indemnify the Project against claims from its own staff.")
    assert h.severity == "medium"


def test_termination_at_any_time_on_a_ground_is_no_convenience_right():
    _, hits = _hits("termination", "The Organiser may terminate this Agreement at any time if it reasonably finds "
                                   "that the sponsorship harms its name.")
    assert hits == []
    h, _ = _one("termination", "The Organiser may terminate this Agreement at any time if it gives the other "
                               "party 15 days' written notice.")
    assert h.severity == "high" and h.facts["notice_days"] == 15
    h, _ = _one("termination", "Either party may terminate this Agreement at any time, for any reason, if the "
                               "other party is notified.")
    assert h.rule == "termination_for_convenience"


def test_arbitration_seat_is_not_called_courts():
    h, _ = _one("governing_law", "Any dispute shall be settled by binding arbitration before an arbitration "
                                 "tribunal in Austin, Texas.")
    assert h.rationale == "Governing law and venue: no governing law, disputes to arbitration in Austin, Texas."
    h, _ = _one("governing_law", "This Agreement is governed by the laws of the State of Ohio.",
                "Disputes are resolved by an arbitral tribunal in Geneva under the ICC Rules.")
    assert h.severity == "medium" and "disputes go to arbitration in Geneva" in h.rationale


def test_indemnity_promised_after_an_aside_counts_as_given():
    # "agrees, at its own cost, to indemnify": the aside between the promise and its object does not
    # hide the second indemnifier, so the indemnities are not one-sided.
    _, hits = _hits("indemnity", "Reseller shall indemnify Maker against claims arising from its sales.",
                    "Maker agrees, at its sole cost, to indemnify and defend Reseller against patent claims.")
    assert hits == []
    h, _ = _one("indemnity", "The Vendor undertakes, on demand, to indemnify the Buyer against tax claims.")
    assert h.facts["indemnifier"].lower() == "vendor" and h.severity == "medium"


def test_carve_out_naming_whose_liability_it_keeps():
    # "excludes or limits the liability of either party for": the carve-out names the party before "for".
    h, ev = _one("liability_cap", "Nothing in these terms limits the liability of either party for: (a) fraud; "
                                  "(b) breach of its confidentiality duties; and (c) its indemnities.")
    assert h.rule == "liability_carve_out" and h.severity == "high" and ev.startswith("Nothing in these terms")
    h, _ = _one("liability_cap", "Nothing in this contract excludes the liability of the Seller for death or "
                                 "personal injury caused by its negligence.")
    assert h.severity == "low" and "death, personal injury" in h.rationale


def test_carve_out_read_from_the_list_its_lead_in_introduces():
    # the claims are items of their own after "... for:": read them, and cite the lead-in with its list
    h, ev = _one("liability_cap", "Nothing in this Agreement limits the liability of the Host or the Members for:",
                 "1. death or personal injury caused by negligence;", "2. fraud; and",
                 "3. any matter the law does not allow to be limited.",
                 "The Host's total liability is limited to the fees received.")
    assert h.severity == "low" and "death, personal injury, fraud" in h.rationale
    assert ev.startswith("Nothing in this") and ev.endswith("allow to be limited.")
    h, _ = _one("liability_cap", "The cap above does not apply to:", "(a) either party's indemnities; and",
                "(b) breach of clause 7 (Confidentiality).")
    assert h.severity == "high"
