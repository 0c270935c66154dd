"""The cited sentence is the operative one of its section, not a related provision beside it.

Short clauses written for these tests in several drafting styles (numbered standard terms,
ALL-CAPS licence text, unnumbered paragraphs); none is taken from a dev document or a
published agreement. docs/REVIEW.md, "The operative sentence of each kind", states the rule.
"""

from __future__ import annotations

from agentctx.agents.clause_candidates import rules_only
from agentctx.retrieval.structure import parse_structure
from tests.agents.cited import best_sentence as _best


def test_the_cap_is_cited_not_the_damages_waiver_in_the_same_section():
    text = ("8. Limitation of Liability\n\n"
            "8.1 Exclusions. Under no circumstances will either party be liable to the other for lost profits, "
            "lost revenues, loss of data, or any indirect, special, incidental or consequential damages, even if "
            "informed of their possibility.\n\n"
            "8.2 Cap. Each party's total cumulative liability arising out of this Agreement will not exceed the "
            "fees paid or payable by Customer in the twelve (12) months before the event giving rise to the "
            "claim.\n")
    assert _best(text, "liability_cap").startswith("Each party's total cumulative liability")


def test_the_cap_is_cited_in_an_all_caps_paragraph_that_opens_with_the_waiver():
    text = ("LIMITATION OF LIABILITY\n\n"
            "IN NO EVENT SHALL THE VENDOR BE LIABLE FOR ANY LOSS OF PROFITS OR BUSINESS, OR FOR ANY INDIRECT, "
            "INCIDENTAL OR CONSEQUENTIAL DAMAGES. THE VENDOR'S AGGREGATE LIABILITY SHALL NOT EXCEED THE GREATER OF "
            "THE AMOUNTS PAID BY THE BUYER HEREUNDER OR FIVE HUNDRED DOLLARS.\n")
    assert _best(text, "liability_cap").startswith("THE VENDOR'S AGGREGATE LIABILITY SHALL NOT EXCEED")


def test_a_waiver_alone_is_still_the_liability_clause():
    text = ("6. No Liability\n\n"
            "The author will not be liable for any indirect or consequential damages, or for lost profits, "
            "arising from the use of the software.\n")
    assert _best(text, "liability_cap").startswith("The author will not be liable")


def test_the_duty_to_pay_is_cited_not_the_dispute_or_late_payment_sentence():
    text = ("4. Fees and Payment\n\n"
            "Client may withhold any invoiced amount that it disputes in good faith, and late payments will bear "
            "interest at one percent per month; the undisputed fees are payable as invoiced.\n\n"
            "Client shall pay each invoice within thirty (30) days after receiving it.\n")
    assert _best(text, "payment") == "Client shall pay each invoice within thirty (30) days after receiving it."


def test_a_termination_lead_in_is_quoted_with_its_grounds():
    text = ("11. Termination\n\n"
            "11.1 Either party may terminate this Agreement immediately by written notice if the other party:\n\n"
            "(a) materially breaches this Agreement and does not cure the breach within thirty (30) days of "
            "notice;\n\n"
            "(b) becomes insolvent or makes an assignment for the benefit of creditors.\n\n"
            "11.2 Effect of Termination. Upon any termination of this Agreement, the Customer will stop using the "
            "Services and each party will return or destroy the other party's Confidential Information.\n")
    quote = _best(text, "termination")
    assert quote.startswith("Either party may terminate this Agreement immediately by written notice if")
    assert quote.endswith("(b) becomes insolvent or makes an assignment for the benefit of creditors.")
    assert "Effect of Termination" not in quote and "return or destroy" not in quote


def test_the_grounds_are_cited_not_the_effect_of_termination():
    text = ("Termination. The Licensor may terminate this licence if the Licensee fails to comply with any of its "
            "terms. Upon any termination of this Agreement, the licence granted in it shall be terminated and the "
            "Licensee shall destroy all copies, and Sections 4 and 5 shall continue to apply.\n")
    assert _best(text, "termination") == ("The Licensor may terminate this licence if the Licensee fails to comply "
                                          "with any of its terms.")


def test_the_choice_of_law_is_cited_not_the_forum():
    text = ("14. Governing Law and Venue\n\n"
            "The courts of Dublin, Ireland have exclusive jurisdiction over any dispute arising out of this "
            "Agreement. This Agreement is governed in all respects by the laws of Ireland.\n")
    assert _best(text, "governing_law") == "This Agreement is governed in all respects by the laws of Ireland."


def test_the_core_confidentiality_duty_is_cited_without_the_additional_protection():
    text = ("Confidentiality. Unless this Agreement permits otherwise, the Recipient will use the Discloser's "
            "Confidential Information only to perform this Agreement and will not disclose it to any third party. "
            "In addition, the Recipient will protect the Discloser's Confidential Information using at least the "
            "same protections it uses for its own similar information, and no less than reasonable care.\n")
    assert _best(text, "confidentiality") == (
        "Unless this Agreement permits otherwise, the Recipient will use the Discloser's Confidential Information "
        "only to perform this Agreement and will not disclose it to any third party.")


def test_the_core_confidentiality_duty_outranks_an_in_addition_sentence_before_it():
    text = ("5. Confidentiality\n\n"
            "5.1 In addition to its other obligations, the Recipient will protect the Discloser's Confidential "
            "Information and keep it confidential using at least the degree of care it uses to keep its own "
            "confidential information confidential.\n\n"
            "5.2 The Recipient will not use the Discloser's Confidential Information except to perform this "
            "Agreement, and will not disclose it to anyone else.\n")
    assert _best(text, "confidentiality").startswith("The Recipient will not use the Discloser's Confidential")


def test_the_related_provisions_still_make_their_kind_found():
    # A related sentence ranks lower; it does not turn a present kind into "not found".
    text = ("3. Payment\n\nLate payments bear interest at the lower of 1.5% per month or the highest lawful rate.\n\n"
            "9. Venue\n\nAll disputes shall be heard by the courts of Ontario, which have exclusive jurisdiction.\n")
    chosen = rules_only(parse_structure(text), ["payment", "governing_law"])
    assert chosen["payment"] is not None


def test_a_permission_to_assign_with_its_condition_is_the_restriction():
    text = ("7. Transfer\n\nA party may transfer all of its rights under this Agreement to another party only if "
            "that party agrees in writing to be bound by these terms.\n\nA party may not transfer a portion of "
            "its licence to a third party.\n")
    assert _best(text, "assignment").startswith("A party may transfer all of its rights")
