"""The operative sentence in drafting families other than licences: consulting, stock purchase and
services agreements converted from Word. Short clauses written for these tests; none is taken from a
dev document or a published agreement. docs/REVIEW.md, "The operative sentence of each kind".
"""

from __future__ import annotations

from agentctx.agents import CLAUSE_KINDS
from agentctx.agents.clause_candidates import draw_candidates, rules_only
from agentctx.agents.clause_operative import operative_adjustment
from agentctx.retrieval.structure import parse_structure
from tests.agents.cited import best_sentence as _best
from tests.agents.cited import kind_found


def test_the_restriction_with_a_list_of_verbs_is_cited_not_the_other_sides_permission():
    text = ("# **Transfers**\n\n"
            "## ***Transfer of this Arrangement*.** This arrangement binds the Advisor's heirs and legal "
            "representatives. The Advisor may not sell, assign or delegate any rights or obligations under this "
            "arrangement, and any such attempted assignment shall be null and void. Notwithstanding the above, "
            "the Client may assign this arrangement to any successor to its business.\n")
    assert _best(text, "assignment").startswith("The Advisor may not sell, assign or delegate")


def test_a_list_of_verbs_about_goods_is_no_assignment_restriction():
    text = ("9. Export\n\n"
            "The Buyer will not ship, transfer or export the Devices into any country where their sale is barred "
            "by law.\n")
    assert not kind_found(text, "assignment")


def test_rights_that_are_not_assignable_are_the_assignment_clause():
    text = ("6. General\n\n"
            "A. Waiver. A failure to enforce a term is no waiver of it.\n\n"
            "B. Assignment. The rights granted to the Investor under this arrangement are not assignable by the "
            "Investor in any event.\n")
    assert _best(text, "assignment").startswith("The rights granted to the Investor")


def test_the_price_of_a_sale_is_the_duty_to_pay():
    text = ("1. Sale of Units. Subject to this Agreement, the Issuer agrees to sell and the Investor agrees to "
            "purchase 1,000 units at a price of $2.00 per unit, for an aggregate purchase price of $2,000.00.\n\n"
            "2. Delivery. The Issuer will deliver the units at its office.\n")
    assert _best(text, "payment").startswith("Subject to this Agreement, the Issuer agrees to sell")


def test_the_hold_in_strictest_confidence_duty_is_cited_not_its_supplement():
    text = ("3. Secrecy\n\n"
            "During the engagement and after it, the Advisor will hold in the strictest confidence the Client's "
            "secret information, and the Advisor will not (i) use it except to perform the work, or (ii) "
            "disclose it to any third party. Without limiting the foregoing, the Advisor shall not use or "
            "disclose the Client's know-how to design similar products for others.\n")
    assert _best(text, "confidentiality").startswith("During the engagement and after it, the Advisor will hold")


def test_no_right_to_assign_or_subcontract_without_consent_is_the_restriction():
    """A restriction worded as a missing right, with "subcontract" among its verbs, is the assignment clause,
    not the other side's permission after it (before, "subcontract" counted against it as a look-alike)."""
    text = ("Assignment\n\n"
            "The engagement is personal to the Adviser, and the Adviser shall not have the right to assign, "
            "transfer, or subcontract any duties under this arrangement without the written consent of the Firm. "
            "The Firm may assign its rights under this arrangement in whole or in part.\n")
    assert _best(text, "assignment").startswith("The engagement is personal to the Adviser")


def test_subcontracting_alone_is_no_assignment_clause():
    text = ("7. Personnel\n\n"
            "The Adviser may subcontract the design work to a studio of its choice without the Firm's consent.\n")
    assert not kind_found(text, "assignment")


def test_a_consultants_duty_to_hold_proprietary_information_in_confidence_is_found():
    """No word of the old contract-voice list ("Consultant", "Proprietary Information") and a heading without
    "confidential": the sentence was zeroed as technical text and the kind reported absent."""
    text = ("Services and Fees\n\n"
            "The Adviser will deliver the Services described in the schedule.\n\n"
            "Ownership; Proprietary Information\n\n"
            "All designs made during the engagement belong to the Firm. "
            "Consultant will hold in confidence and not disclose or use any Proprietary Information, except to "
            "perform the Services.\n")
    assert _best(text, "confidentiality").startswith("Consultant will hold in confidence")


def test_terms_that_bind_for_as_long_as_the_service_is_used_state_the_term():
    text = ("## Duration\n\n"
            "These Conditions shall continue to bind the Member for so long as the Member uses the Platform.\n\n"
            "### Consequences of ending\n\nThe fees clause survives the end of these Conditions.\n")
    assert _best(text, "term").startswith("These Conditions shall continue to bind")


def test_a_right_to_cancel_or_summarily_terminate_on_liquidation_is_termination():
    """Drafting of the South African and English tradition: "cancel these Terms", "entitled to summarily
    terminate ... liquidation", where the rules knew only "may terminate" and "insolvent"."""
    text = ("## Breach\n\n"
            "Should a Party fail to remedy a breach within 14 days of written notice, the other Party shall be "
            "entitled to cancel these Terms and claim damages.\n\n"
            "Either Party shall be entitled to summarily terminate these Terms in the event of the other Party "
            "being placed in liquidation.\n")
    best = _best(text, "termination")
    assert best.startswith(("Should a Party fail", "Either Party shall be entitled")), best


def test_liability_limited_to_the_fees_paid_is_the_cap_not_an_exclusion_for_outages():
    text = ("## Liability\n\n"
            "### Limits\n\n"
            "Our liability to the Member under these Conditions shall furthermore be limited to the total amount "
            "of the fees the Member paid in the prior year.\n\n"
            "### Outages\n\n"
            "Save as set out in the Service Levels, we shall not be liable for any Losses caused by planned "
            "outages of the Platform.\n")
    assert _best(text, "liability_cap").startswith("Our liability to the Member")


def test_a_web_published_service_agreement_names_its_sides_in_the_preamble_and_lists_its_grounds():
    """Clause titles in HTML heading tags, sub-clauses set in by indentation, the preamble under a title heading,
    defined names in bold around their quotes."""
    text = ("# Hosting terms\n\n"
            "These hosting terms (the **\"Agreement\"**) apply from the order date between Northwind Hosting Ltd "
            "(**\"Host\"**) and the client named in the order form (**\"Client\"**).\n\n"
            "1. <h2>Ending this arrangement</h2>\n"
            "   1.  This Agreement lasts until the end of the hosting period.\n"
            "   2.  Either party may terminate this Agreement at once by notice if the other party:\n"
            "       1.  breaches it and does not put the breach right within 10 days; or\n"
            "       2.  becomes insolvent.\n"
            "   3.  On expiry Client will pay all unpaid fees.\n"
            "2. <h2>General</h2>\n"
            "   1.  This Agreement is the entire agreement between Host and Client and supersedes all proposals.\n")
    assert _best(text, "parties").startswith("These hosting terms")
    grounds = _best(text, "termination")
    assert grounds.startswith("Either party may terminate") and grounds.endswith("becomes insolvent."), grounds


def test_the_integration_clause_is_not_where_the_sides_are_named():
    text = ("1. Services. The Supplier will host the site.\n\n"
            "2. Entire Agreement. This Agreement constitutes the entire agreement between the Supplier and the "
            "Buyer and supersedes all prior proposals.\n")
    assert not kind_found(text, "parties")


def test_an_offer_form_opening_names_the_sides():
    text = ("# Beta Agreement\n\n"
            "Because you would like to try the beta release, Lumen Labs is willing to grant you a limited licence "
            "to use it on the terms of this Beta Agreement.\n\n"
            "1. **Use**. You may use the beta release for evaluation only.\n\n"
            "2. **Entire Agreement**. This Beta Agreement is the entire agreement between you and Lumen Labs about "
            "the beta release and supersedes all earlier discussions.\n")
    assert _best(text, "parties").startswith("Because you would like")


def test_plain_language_terms_name_the_sides_in_their_acceptance_and_end_the_agreement():
    """Plain-language terms say "agree to these terms with X" for the sides and "may end the agreement" for
    termination; their integration clause ("these terms embody all the terms of agreement between you and
    X") is not where the sides are named."""
    text = ("To join the forum, you must agree to these terms with Birchwood Clubs, the club that hosts it.\n\n"
            "# Your Posts\n\n"
            "- Between you and the club, you own what you post.\n\n"
            "# Ending Our Agreement\n\n"
            "- You or the club may end the agreement in these terms at any time.  When it ends, your access ends "
            "too.\n\n"
            "# Odds and Ends\n\n"
            "- These terms embody all the terms of agreement between you and the club about the forum, and "
            "entirely replace any other agreements about it.\n")
    assert _best(text, "parties").startswith("To join the forum, you must agree to these terms with")
    assert _best(text, "termination").lstrip("- ").startswith("You or the club may end the agreement")


def test_keeping_a_password_secret_is_no_confidentiality_clause():
    text = ("# Your Login\n\n"
            "- You agree to choose a strong password for your profile, and keep it secret.\n\n"
            "# Conduct\n\n"
            "- You may not post anything unlawful.\n")
    assert not kind_found(text, "confidentiality")


def test_a_fee_kept_out_of_the_funds_handled_is_the_payment_term_not_a_bookkeeping_list():
    """A sponsor or an agent is paid by keeping its fee out of the money it handles; "accounts payable"
    in a list of activities is bookkeeping, not a duty to pay."""
    text = ("# Hosting Arrangement\n\n"
            "## Activities\n\n"
            "The Host will carry on these activities for the Group:\n\n"
            "- Event planning\n"
            "- Accounts payable and receivable\n"
            "- Grant reporting\n\n"
            "## Money\n\n"
            "The Host may deduct a service fee of 5% from each donation it receives for the Group, as payment "
            "for its work.\n")
    assert _best(text, "payment").startswith("The Host may deduct a service fee")


def test_a_non_disclosure_duty_in_the_passive_is_the_confidentiality_clause():
    """The information as the subject ("Confidential Information shall not be disclosed ..."): the duty all
    the same, not the definition before it nor the standard of care after it."""
    text = ("8. Non-Disclosure\n\n"
            "All pricing and product plans that the Supplier shares with the Dealer are confidential to the "
            "Supplier (the \"Restricted Data\"). Restricted Data shall not be copied, used or disclosed to any "
            "third party except to perform this arrangement. The Dealer will apply reasonable care to protect "
            "Restricted Data.\n")
    assert _best(text, "confidentiality").startswith("Restricted Data shall not be copied, used or disclosed")


def test_a_passive_disclosure_permission_is_not_the_duty():
    """Only "shall not be disclosed" is the duty; a permission ("may be disclosed to auditors") is not."""
    text = ("4. Records\n\n"
            "The Dealer's sales reports may be disclosed to the Supplier's auditors on request.\n")
    assert not kind_found(text, "confidentiality")


def test_an_offered_service_names_its_sides_in_defined_roles():
    """Public-sector terms of use open with who offers the service to whom: "(a "Bidder")", "(referred to
    below as the "Province")"; the roles of public-sector drafting are sides."""
    text = ("1. The Tender Portal (the \"Portal\") is offered to firms that wish to tender for works (a "
            "\"Bidder\"). The Portal is run by the Province of Lakeland (referred to below as the \"Province\").\n\n"
            "2. The Bidder will keep its tender prices up to date.\n")
    assert "(a \"Bidder\")" in _best(text, "parties") or "Province\")" in _best(text, "parties")


def test_a_breached_term_of_the_agreement_is_a_provision_not_its_duration():
    text = ("7. The Province may terminate this Agreement:\n\n"
            "    (a) at once if the Bidder has breached a term of this Agreement; or\n\n"
            "    (b) on 5 days' notice for any other reason.\n")
    assert not kind_found(text, "term")


def test_no_action_may_be_brought_for_any_loss_is_the_exclusion_of_liability():
    text = ("4. The Bidder will keep its contact details current.\n\n"
            "5. No action may be brought by any person against the Province for any loss or damage caused by the "
            "portal being unavailable.\n")
    assert _best(text, "liability_cap").startswith("No action may be brought")


def test_keeping_log_in_or_profile_information_confidential_is_account_security():
    text = ("8. The Bidder will keep its profile log information and passcodes confidential.\n\n"
            "9. This Agreement is governed by the laws of Lakeland.\n")
    assert not kind_found(text, "confidentiality")


def test_the_consent_before_the_verb_is_the_restriction_not_a_profile_that_is_not_to_be_shared():
    text = ("11. The Bidder will not, without the prior written consent of the Province, assign or transfer this "
            "Agreement.\n\n"
            "12. The Bidder will keep its profile confidential and will not assign or permit its profile to be "
            "used by any other person.\n")
    assert _best(text, "assignment").startswith("The Bidder will not, without the prior written consent")


# Plain-language services contracts and contributor agreements (the seventh round). Snippets written here.

def test_between_a_defined_side_and_you_names_the_parties():
    """A plain-language contract names one side by a defined name and the other as "you"."""
    text = ("# Design Services Contract\n\n"
            "Between us, Northwind Studio (\"Northwind\") and you, the client named below.\n\n"
            "## The Work\n\nNorthwind will design the pages listed in the brief.\n")
    assert _best(text, "parties").startswith("Between us, Northwind Studio")


def test_a_defined_name_between_two_others_is_no_parties_clause():
    """The rule wants "you" as the other side: a defined name in a sentence that shares something "between"
    two third parties names no side of the contract."""
    text = ("4. Printing\n\n"
            "The print costs (the \"Costs\") are split between the studio and the printer.\n")
    assert not kind_found(text, "parties")


def test_the_contract_staying_in_place_is_its_term():
    text = ("## Odds and Ends\n\n"
            "Nobody may hand this arrangement on without asking first. This contract stays in place until the "
            "last page is delivered.\n")
    assert _best(text, "term").startswith("This contract stays in place")


def test_remaining_parts_that_remain_in_place_are_severability_not_the_term():
    text = ("## Odds and Ends\n\n"
            "If one part of these terms cannot be enforced, the remaining parts remain in place.\n")
    assert not kind_found(text, "term")


def test_maintaining_the_confidentiality_of_what_the_other_side_gives_is_confidentiality():
    text = ("## Who does what\n\n"
            "The designer will meet the dates agreed and will maintain the confidentiality of all material the "
            "client supplies.\n")
    assert kind_found(text, "confidentiality")


def test_the_contract_under_the_exclusive_jurisdiction_of_courts_is_its_only_law_clause():
    """No law is named: the sentence that puts the contract under a forum is all there is."""
    text = ("## Fine Print\n\n"
            "The wording is informal, but this contract is a binding agreement subject to the exclusive "
            "jurisdiction of Toronto, Ontario courts.\n")
    assert _best(text, "governing_law").startswith("The wording is informal")


def test_a_contracted_cant_transfer_without_permission_is_the_restriction():
    text = ("## Fine Print\n\n"
            "You can't transfer this contract to anyone else without our written permission.\n")
    assert _best(text, "assignment").startswith("You can't transfer this contract")


def test_the_restriction_naming_the_agreement_outranks_a_permission_that_cannot_be_passed_on():
    text = ("1. Your Access\n\n"
            "You can't transfer your access to anyone else.\n\n"
            "2. General\n\n"
            "You may not assign your agreement with the studio.\n")
    assert _best(text, "assignment").startswith("You may not assign your agreement")


def test_assigning_without_the_other_sides_approval_is_the_restriction():
    text = ("9. General\n\n"
            "Neither party may assign this arrangement without the prior approval of the other party.\n")
    assert _best(text, "assignment").startswith("Neither party may assign")


def test_a_condition_of_the_assignment_is_the_assignment_clause():
    """A contributor agreement lets either side assign, on a condition: that condition is the clause."""
    text = ("7. Other Terms\n\n"
            "7.1 If the Maintainer or the Contributor assigns its rights under this arrangement, as a condition "
            "of the assignment the assignee must agree in writing to be bound by all of its terms.\n")
    assert _best(text, "assignment").startswith("If the Maintainer or the Contributor assigns")


def test_keeping_to_the_payment_schedule_is_cited_not_a_statement_of_understanding():
    text = ("## Payments\n\n"
            "We know how important it is to pay your invoices quickly. We agree to keep to the payment schedule "
            "below.\n\n"
            "[schedule]\n")
    assert _best(text, "payment").startswith("We agree to keep to the payment schedule")


# A promissory note (eighth blind round): the instrument names its sides in the promise to pay, the promise is the
# duty to pay, and a transfer allowed only on a condition is its assignment clause.
_NOTE = ("BRIDGE NOTE\n\n"
         "For value received, Bellweather Robotics, Inc. (the \"Borrower\") promises to pay to the order of Ada "
         "Ventures LP (the \"Lender\") the principal sum of $50,000 with interest on the unpaid principal at 6% per "
         "annum.\n\n"
         "2. Conversion Mechanics\n\n"
         "2.1 Fractions. On a conversion, in lieu of any fractional units the Borrower shall pay the Lender cash "
         "equal to the fraction times the conversion price.\n\n"
         "2.2 For purposes of this certificate, a \"Sale Event\" means a merger of the Borrower, a change of "
         "control of the Borrower or a transfer of all or substantially all of its assets.\n\n"
         "3. Transfers\n\n"
         "This certificate may be transferred only upon its surrender to the Borrower for registration, duly "
         "endorsed.\n")


def test_a_makers_promise_to_pay_is_the_duty_to_pay_not_the_cash_for_a_fractional_unit():
    """"promises to pay" is a duty to pay, the interest a loan bears on its principal is part of the debt (not
    late interest), and cash paid in lieu of a fractional unit is a mechanic of the conversion."""
    assert _best(_NOTE, "payment").startswith("For value received, Bellweather Robotics")


def test_the_promise_to_pay_names_the_maker_and_the_payee():
    """No "between": the defined maker promises to pay the defined payee. Both kinds cite the promise, since it
    carries both (before, parties lost it to payment and fell back to nothing)."""
    chosen = rules_only(parse_structure(_NOTE), CLAUSE_KINDS)
    for kind in ("parties", "payment"):
        assert chosen[kind] is not None, kind
        assert _NOTE[chosen[kind].unit_start:].startswith("For value received"), kind


def test_a_transfer_allowed_only_on_a_condition_is_the_assignment_clause_not_a_definition():
    assert _best(_NOTE, "assignment").startswith("This certificate may be transferred only upon")


def test_a_definition_is_never_the_operative_sentence_but_of_the_sides():
    sale = 'For purposes of this certificate, a "Sale Event" means a merger or a change of control of the Borrower.'
    delta, why = operative_adjustment("assignment", sale)
    assert delta < 0 and why == ["-definition"]
    assert operative_adjustment("term", '"Renewal Term" means each further period of one year.')[0] < 0
    assert operative_adjustment("parties", '"Licensor" means the owner of the copyright.') == (0.0, [])


# Ninth round: a consultancy's terms that say what it will not keep confidential before what it will, and a
# data processing addendum whose term runs "until the Agreement expires or is terminated" and whose permission
# to redact names the confidential information it protects.
_STUDIO_TERMS = ("7. Openness\n\n"
                 "    1.  The Studio prefers to work in the open.\n"
                 "    2.  The Studio will normally not keep the following confidential:\n\n"
                 "        1.  That the Studio works for you;\n"
                 "        2.  The budget of the Project.\n\n"
                 "    3.  But the Studio does regard the following as confidential:\n\n"
                 "        1.  Drafts you have not yet published;\n"
                 "        2.  Anything you send us that is marked private.\n\n"
                 "8. Law\n\n"
                 "    1.  These terms are governed by Scots law.\n")


def test_what_a_side_regards_as_confidential_is_the_duty_not_what_it_will_not_keep_confidential():
    """"regards (treats, considers) X as confidential" states the duty; "will not keep X confidential" denies
    one (before, the denial was cited, since "keep ... confidential" matched and "regard" did not)."""
    quote = _best(_STUDIO_TERMS, "confidentiality")
    assert quote.startswith("But the Studio does regard the following as confidential:")
    assert "marked private" in quote  # the lead-in is quoted with its items


def test_a_denied_confidentiality_duty_is_no_confidentiality_clause():
    text = ("5. Feedback\n\n"
            "We will not treat the ideas you send us about the Platform as confidential, and we may use them "
            "freely.\n")
    assert not kind_found(text, "confidentiality")
    duty = ("5. Secrecy\n\n"
            "The Agency shall not disclose and keep confidential the Client's plans for the Platform.\n")
    assert kind_found(duty, "confidentiality")


_ADDENDUM = ("Data Processing Addendum\n\n"
             "4. Subprocessors\n\n"
             "The Vendor may share a copy of each subprocessor contract on request. To the extent needed to protect "
             "trade secrets or other confidential information, the Vendor may redact the copy before sharing "
             "it.\n\n"
             "9. Duration\n\n"
             "This Addendum takes effect when the Client signs the Main Agreement and will continue until the Main "
             "Agreement expires or is terminated.\n")


def test_a_term_that_runs_until_the_agreement_is_terminated_is_no_termination_clause():
    """"will continue until ... expires or is terminated", "until terminated", "unless sooner terminated" say how
    long the agreement lasts, not who may end it (before, "is terminated" made the duration a termination
    clause)."""
    assert not kind_found(_ADDENDUM, "termination")
    assert _best(_ADDENDUM, "term").startswith("This Addendum takes effect")


def test_a_right_to_terminate_is_still_read_beside_its_duration():
    text = ("12. Term and Termination\n\n"
            "This Agreement continues until terminated. Either party may terminate this Agreement on 30 days' "
            "written notice.\n")
    assert _best(text, "termination").startswith("Either party may terminate this Agreement")


def test_protecting_confidential_information_as_the_purpose_of_a_permission_is_no_duty():
    """"To the extent needed to protect ... confidential information, X may redact" is why a side may do
    something, not a duty to protect (before, "protect ... confidential" made it a confidentiality clause)."""
    assert not kind_found(_ADDENDUM, "confidentiality")


def test_a_duty_to_protect_confidential_information_still_counts():
    text = ("6. Secrecy\n\n"
            "The Supplier shall use reasonable efforts to protect the Client's confidential information from "
            "disclosure to anyone else.\n")
    assert kind_found(text, "confidentiality")


# Round ten: an Irish employment agreement and an English precedent's agreement (numbered list of the sides).

def test_the_sides_listed_after_between_name_the_parties_not_a_definition():
    """A precedent lists the sides one a paragraph after "Between:", each naming itself in brackets; the list is
    where the parties are named, not the later definition of one of them (before, the definition was cited)."""
    text = ("Service Agreement\n\n"
            "This agreement is dated 1 March 2025.\n\n"
            "Between:\n\n"
            "(1) Harbour Tools Limited, a company registered in Scotland (\u201cHarbour\u201d); and\n\n"
            "(2) Morag Quinn of Leith (\u201cthe Engineer\u201d).\n\n"
            "1. Duties\n\nThe Engineer will service the cranes.\n\n"
            "9. Definitions\n\n\u201cGroup\u201d means Harbour and its subsidiaries.\n\n"
            "\u201cCompany\u201d means Harbour and its successors.\n")
    assert _best(text, "parties").startswith("Harbour Tools Limited, a company registered in Scotland")


def test_the_sides_listed_under_a_parties_heading_name_the_parties():
    text = ("# SUPPLY AGREEMENT\n\n"
            "# PARTIES\n\n"
            "1) **NORTHFIELD MILLS LIMITED** a company registered in England (**Northfield**); and\n\n"
            "2) The growers named in Schedule 1 (each a **Grower**).\n\n"
            "# AGREED TERMS\n\n"
            "1. ## DEFINITIONS\n\n"
            "   **Parties** means the parties to this agreement.\n")
    assert _best(text, "parties").startswith("**NORTHFIELD MILLS LIMITED**")


def test_a_salary_the_employee_shall_be_paid_is_the_duty_to_pay():
    """An employment agreement states the duty to pay from the payee's side ("You shall be paid a salary of ...");
    before, the employer's promise to pay a home-office cost was cited instead."""
    text = ("4. Salary\n\n"
            "You shall be paid a basic annual salary of GBP 48,000, payable monthly in arrears.\n\n"
            "7. Home working\n\n"
            "The Employer will provide a laptop and will pay a share of the cost of your broadband.\n")
    assert _best(text, "payment").startswith("You shall be paid a basic annual salary")


def test_assigning_duties_to_a_person_is_no_assignment_clause():
    """"may assign you other duties" gives work, it does not assign the agreement; the employer's right to move the
    employment to a group company is the assignment clause (before, the duties sentence was cited)."""
    text = ("3. Role\n\n"
            "The Employer may assign you additional duties from time to time, but will not assign you tasks you "
            "cannot reasonably perform.\n\n"
            "The Employer may assign your employment to any group company on the same terms.\n")
    assert _best(text, "assignment").startswith("The Employer may assign your employment to any group company")


def test_a_limit_on_an_amount_to_be_refunded_is_no_liability_cap():
    """"the amount to be refunded will not exceed the damages recovered" limits a refund of sick pay, not anyone's
    liability (before, it was reported as a liability cap)."""
    text = ("8. Sick pay\n\n"
            "If your absence is caused by a third party, you will refund the sick pay you received out of any "
            "damages you recover. The amount to be refunded will not exceed the damages recovered.\n")
    assert not kind_found(text, "liability_cap")


def test_a_cap_on_liability_that_mentions_a_refund_is_still_a_cap():
    text = ("11. Liability\n\n"
            "The Supplier's total liability will not exceed the fees to be refunded under clause 6.\n")
    assert kind_found(text, "liability_cap")


def test_a_sides_right_to_terminate_outranks_an_ending_that_follows_another_contract():
    """"Either party may terminate this Agreement if ..." is the termination clause, not the item of the term that
    ends the agreement when another contract ends (before, the earlier item won a tie)."""
    text = ("12. TERM AND TERMINATION\n\n"
            "   1. This Agreement starts on the Start Date and continues until the work is done unless:\n\n"
            "      1. the Head Contract is terminated for any reason, in which case this Agreement shall "
            "automatically terminate; or\n\n"
            "      2. this Agreement is terminated under clause 12.2.\n\n"
            "   2. Either party may terminate this Agreement by written notice if the other party fails to pay a "
            "sum due.\n")
    assert _best(text, "termination").startswith("Either party may terminate this Agreement by written notice")


def test_the_payees_remuneration_it_will_receive_is_the_duty_to_pay():
    """A release written in the first person states the pay from the payee's side: "I will receive ... a fee as
    set out below" (before, no payment pattern read it and payment was reported absent)."""
    text = ("## Fees and expenses\n\n"
            "As a Panellist, I will receive a free day ticket and the honorarium stated in the schedule. I will not "
            "receive any other compensation for taking part.\n")
    decision = draw_candidates(parse_structure(text), "payment")
    assert decision.found
    assert _best(text, "payment").startswith("As a Panellist, I will receive a free day ticket")


def test_making_a_contribution_in_an_amount_is_the_duty_to_pay_not_its_due_date():
    """"The Donor shall make a contribution ... in the amount shown in Schedule 1" is the duty and its basis; the
    schedule's "The Donation is due within 14 days" is its due date (before, the due date was cited, "due within 14
    days" counting twice as core language)."""
    text = ("2. Donation. The Donor shall make a contribution to the Trust (the \"Donation\") in the amount shown "
            "in Schedule 1.\n\n"
            "3. Publicity. The Trust will name the Donor in its annual report.\n\n"
            "SCHEDULE 1\n\n"
            "1. The Donation is due within fourteen (14) days of the Start Date.\n")
    assert _best(text, "payment").startswith("The Donor shall make a contribution to the Trust")


def test_a_contributors_contributions_are_no_payment():
    text = ("3. Submissions\n\n"
            "You will make Contributions to the Project under the terms of this document.\n")
    assert not kind_found(text, "payment")


def test_due_within_days_counts_once_as_core_payment_language():
    due, why = operative_adjustment("payment", "all amounts are due within 30 days after the invoice date.")
    assert due == 0.75, why
    assert operative_adjustment("payment", "the customer will pay within 30 days of the invoice.")[0] == 1.5


def test_no_obligation_to_pay_denies_the_duty():
    """"will have no obligation to pay any fees invoiced late" denies the duty; the duty itself is cited (before, the
    denial outranked it once "due within" counted once)."""
    text = ("10. Charges\n\n"
            "10.1 Charges. The Client will pay the charges stated in the Order.\n\n"
            "10.2 Late invoices. The Client will have no obligation to pay any charges that the Supplier invoices "
            "more than 90 days after the work is done.\n")
    assert _best(text, "payment").startswith("The Client will pay the charges stated in the Order.")


def test_net_cash_terms_of_a_sale_are_the_duty_to_pay_not_the_cost_of_a_replacement():
    """A distribution agreement states how the distributor pays as trade terms ("Terms are net cash upon delivery");
    a warranty's "agrees to pay all charges associated with each such repair" allocates costs (before, the
    allocation was cited: net terms matched no payment pattern)."""
    text = ("ARTICLE 1 SUPPLY\n\n"
            "1.01. Price List. All prices are in euros, ex works at the Maker's plant.\n\n"
            "1.02. Terms. Terms are net cash upon delivery.\n\n"
            "ARTICLE 2 WARRANTY\n\n"
            "2.01. Defects. The Maker will repair any defective Unit within sixty days. If no fault is found in the "
            "Unit, the Reseller agrees to pay all charges associated with each such repair.\n")
    assert _best(text, "payment") == "Terms are net cash upon delivery."


def test_net_terms_are_payment_language_and_net_of_taxes_is_not():
    assert operative_adjustment("payment", "invoices are payable net thirty (30) days after receipt.")[0] > 0
    assert operative_adjustment("payment", "amounts are payable upon delivery of the goods.")[0] > 0
    assert operative_adjustment("payment", "the revenue is reported net of taxes.")[0] <= 0


def test_instalments_that_must_be_paid_by_a_time_are_the_duty_to_pay_not_the_cost_of_freight():
    """A supply agreement states its payment terms as instalments in the passive voice ("40% of the order price must
    be paid when the order is placed"); the buyer's duty to pay freight and insurance is the allocation of carriage
    costs (before, the freight sentence was cited: "must be paid on ..." matched no payment pattern)."""
    text = ("4. DELIVERY AND PAYMENT\n\n"
            "4.1 Delivery. Goods are delivered ex works. The Buyer agrees to pay freight, insurance and any related "
            "expenses.\n\n"
            "4.2 Payment terms. Unless agreed otherwise in writing, 40% of the order price must be paid on placement "
            "of the order.\n")
    assert _best(text, "payment").startswith("Unless agreed otherwise in writing, 40% of the order price must be paid")


def test_a_price_to_be_paid_before_shipment_is_payment_language():
    assert operative_adjustment("payment", "the balance must be paid prior to shipment of the goods.")[0] > 0
    assert operative_adjustment("payment", "all carriage costs shall be paid by the buyer.")[0] <= 0


def test_the_purchase_a_buyer_will_make_at_a_price_is_the_duty_to_pay_not_each_sides_own_costs():
    """A share purchase states the buyer's duty as "will purchase ... at a purchase price per share equal to the
    Price"; "each party will pay the costs it incurs" is each side bearing its own costs (before, that was cited)."""
    text = ("1. Sale of Units\n\n"
            "1.1 Subject to this Agreement, each investor named in the Annex (each, an \"Investor\") will purchase at "
            "the Closing, and the Issuer agrees to sell to such Investor, the number of units shown opposite the "
            "Investor's name in the Annex, at a purchase price per unit equal to the Unit Price.\n\n"
            "7. General\n\n"
            "7.4 Costs. Each party will pay all costs and expenses that it incurs in negotiating and performing "
            "this Agreement.\n")
    assert _best(text, "payment").startswith("Subject to this Agreement, each investor named in the Annex")


def test_a_force_majeure_excuse_is_no_liability_cap():
    """"Neither party is liable for a breach when the breach is a result of an event beyond its control" excuses
    performance; it limits no liability (before, it was reported as the cap of an agreement that has none)."""
    text = ("12. GENERAL\n\n"
            "12.1 Notices. Notices must be in writing.\n\n"
            "12.2 Events beyond control. Neither party is liable to the other for a breach of this agreement when the "
            "breach is a result of flood, fire, war or any other event beyond the reasonable control of that party.\n")
    assert not kind_found(text, "liability_cap")
