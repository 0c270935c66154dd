"""Named patterns of the clause lexicon: drafting that several kinds read, or that the operative rules share.

Each constant is a regular expression (a string, matched case-insensitively on a normalised sentence) for
one way contracts state something: a side's promise to pay, a restriction on transfer, a cost a side bears,
an excuse for events beyond control. :mod:`.clause_lexicon` puts them in the kinds' lexicons (as operative
language or as look-alikes) and :mod:`.clause_operative` uses some of them as core or related language.
:func:`legal_voice` tells a contract's sentence from a manual's.
"""

from __future__ import annotations

import re

__all__ = ["PARTY_ROLES", "FEE_TAKEN", "DURATION_UNTIL_TERMINATED", "MAY_END", "PAY_SCHEDULE",
           "PROMISE_TO_PAY_SIDES", "MAY_BE_TRANSFERRED_ONLY", "NOT_MODAL", "CONSENT", "ASSIGN_CONDITION",
           "TO_BE_PAID", "TO_RECEIVE_PAY", "MAKE_PAYMENT", "NET_TERMS", "DUE_ON_DELIVERY", "COST_OF_REPAIR",
           "PAID_BY_WHEN", "CARRIAGE_COSTS", "OWN_COSTS", "PURCHASE_AT_PRICE", "EXCUSED_EVENT", "REFUND_LIMIT",
           "PARTY_MAY_TERMINATE", "PASSIVE_NONDISCLOSURE",
           "DENIED_INDEMNITY", "NEITHER_MAY_ASSIGN", "NOR_DISCLOSE", "IN_CONFIDENCE",
           "LIST_NOT_DISCLOSE", "CAP_AMOUNT", "PAY_DENIED", "LIABILITY_LIMITED_TO", "CONFIDENTIAL_DENIED",
           "legal_voice"]

# Words that name a side of an agreement; a definition of one ("'Licensor' means ...") names a party.
PARTY_ROLES = frozenset("""licensor licensee licensors licensees you your recipient contributor contributors customer
    client vendor supplier provider partner company user end-user buyer seller parties party holder distributor
    reseller developer owner authority province crown commonwealth ministry department council contractor
    consultant subscriber bidder
    purchaser""".split()) | {"copyright holder", "end user", "the parties", "initial developer",
                                            "original contributor", "the licensor", "the licensee"}

_DAYS = r"(?:\w+[\s-]+)?\(?\d+\)?\s*(?:business\s+|calendar\s+)?days?"
# "may debit (or withhold) administrative fees from the fund", "deducts its commission from each payment"
FEE_TAKEN = r"\b(?:debit|deduct|withhold|retain|collect)s?\b[^.;]{0,40}\b(?:fees?|commissions?)\b[^.;]{0,60}\bfrom\b"
# How long an agreement lasts, stated through its end: "continues until the Main Agreement expires or is
# terminated", "is effective until terminated", "unless sooner terminated". Not a termination clause where the
# sentence gives no side a right to terminate.
DURATION_UNTIL_TERMINATED = (r"^(?!.*\b(?:may|shall|will|can|must)\s+(?:\w+\s+){0,2}terminate\b)"
                             r".*\b(?:until|unless)\s+(?:[^.;]{0,80}?\b(?:is|are|be|been)\s+)?(?:\w+\s+)?terminated\b")
# "either party may end this agreement", "you may end the agreement written out in these terms"
MAY_END = (r"\bmay\s+(?:\w+\s+){0,2}end\s+(?:this|these|the|our|your|its)\s+(?:\w+\s+){0,2}"
            r"(?:agreement|licen[cs]e|contract|terms|relationship|subscription)\b")
# "we agree to stick to the following payment schedule", "will keep to the payment schedule": a duty to pay
# stated as keeping to a schedule
PAY_SCHEDULE = (r"\b(?:agrees?\s+to|will|shall|must)\s+(?:\w+\s+)?(?:stick|keep|adhere|abide|hold|follow)\s+"
                r"(?:(?:to|by)\s+)?(?:the|this|a|our)\s+(?:\w+\s+){0,2}payment\s+schedule\b")
# The maker of a promissory note, defined, promises to pay the payee, defined: "For value received Acme, Inc. (the
# "Issuer") promises to pay to the order of the registered holder (the "Noteholder") the principal sum ...". The
# promise names both sides, as "between A and B" does in an agreement.
PROMISE_TO_PAY_SIDES = (r"\(\s*(?:the\s+)?[*_]*[\"\u201c][^\"\u201d]{1,40}[\"\u201d][*_]*\s*\)[^.;]{0,80}?"
                        r"\bpromises?\s+to\s+pay\s+(?:to\s+)?[^.;]{0,160}?\(\s*(?:the\s+)?[*_]*[\"\u201c]")
# A permission to transfer that holds only on a condition is the restriction: "This Note may be transferred only
# upon its surrender to the Issuer", "may only be assigned with the consent of ...".
MAY_BE_TRANSFERRED_ONLY = (r"\bmay\s+only\s+be\s+(?:assigned|transferred)\b|\bmay\s+be\s+(?:assigned|transferred)\b"
                           r"[^.;]{0,60}?\bonly\s+(?:if|upon|on|with|after|to|by|in\s+accordance)\b")
# "may not", "cannot", and plain-language drafting's contractions ("you can't transfer this contract", "won't")
NOT_MODAL = r"(?:(?:may|shall|will|must|can)\s*not|(?:can|won|mustn|shan)['\u2019]t)"
# what a restriction waits for: "without the prior written consent (permission, approval) of the other party"
CONSENT = r"(?:consent|permission|approval)"
# a condition on assigning stated as such: "as a condition of the assignment, the assignee must agree in writing
# to ...", "as a condition precedent to any transfer"
ASSIGN_CONDITION = (r"\bas\s+a\s+condition\s+(?:of|to|precedent\s+to)\s+(?:the|any|such|each|that|an?)\s+"
                    r"(?:assignment|transfer)\b")
# An employee's or a contractor's pay stated from the payee's side: "You shall be paid a gross annual salary of
# EUR 90,000", "the Consultant will be paid a fee of ...". Shared with the operative rules (core language).
TO_BE_PAID = (r"\b(?:shall|will|is\s+to|are\s+to)\s+be\s+paid\s+(?:an?\s+|the\s+|your\s+|his\s+|her\s+|their\s+)?"
              r"(?:[\w-]+\s+){0,3}(?:salary|wages?|remuneration|compensation|fees?)\b")
# The same duty from the payee's side when it receives its pay: "As a Presenter, I will receive ... other remuneration
# as listed below", "the Consultant shall receive a fee of ...", "is entitled to receive compensation". Not "will not
# receive any compensation" (the modal must be followed by "receive").
TO_RECEIVE_PAY = (r"\b(?:shall|will|is\s+to|are\s+to|(?:is|are|am|be)\s+entitled\s+to)\s+receive\b[^.;]{0,80}?"
                  r"\b(?:remuneration|compensation|fees?|salary|wages?|honorari(?:um|a)|stipends?)\b")
# "Sponsor shall make a contribution to the PSF ... in the amount shown in Exhibit A", "shall make payment by bank
# transfer", "agrees to make the payments set out in Schedule 2": making a payment is paying. A contribution or a
# donation counts only with its amount (a contributor licence's "Contributions" are code, not money).
MAKE_PAYMENT = (r"\b(?:shall|will|must|agrees?\s+to|undertakes?\s+to)\s+make\s+(?:an?\s+|the\s+|all\s+|such\s+)?"
                r"(?:[\w-]+\s+){0,2}(?:payments?\b|(?:contributions?|donations?)\b(?=[^.;]{0,80}\b(?:amount|sum)\b))")
# The trade terms of a sale, how a distributor or a buyer pays for goods: "Terms are net cash upon delivery", "net
# thirty (30) days", "net 30", "cash on delivery". Not "net of taxes" or "net revenue" (a number or cash must follow).
NET_TERMS = r"\bnet\s+(?:cash\b|\(?\d{1,3}\)?(?![\d.,%])|\w+\s+\(\d{1,3}\)\s+days\b)|\bcash\s+(?:up)?on\s+delivery\b"
# When the price of goods falls due: "payable upon delivery", "due on receipt", "cash upon delivery"
DUE_ON_DELIVERY = r"\b(?:due|payable|paid|cash)\s+(?:in\s+full\s+)?(?:up)?on\s+(?:delivery|receipt|shipment)\b"
# What a side bears for repairs, replacements or carriage ("agrees to pay all charges associated with each such
# replacement", "shall bear all costs of transportation"): the allocation of costs, not the duty to pay the price.
COST_OF_REPAIR = (r"\b(?:pay|bear)\s+(?:all\s+|any\s+)?(?:the\s+)?(?:charges|costs|expenses)\s+"
                  r"(?:associated\s+with|of|for)\s+"
                  r"(?:\w+\s+){0,2}(?:replacements?|repairs?|returns?|shipping|transportation|carriage)\b")
# Instalments stated in the passive voice with the time they fall due: "50% of the order cost must be paid on
# placement of the order", "the balance shall be paid prior to shipment". Not "shall be paid by the Buyer" (who
# bears a cost, see CARRIAGE_COSTS).
PAID_BY_WHEN = (r"\b(?:shall|will|must|is\s+to|are\s+to)\s+be\s+paid\s+(?:in\s+full\s+|in\s+advance\s+)?"
                r"(?:(?:up)?on|prior\s+to|before|at|no\s+later\s+than)\b")
# Carriage costs a side bears ("The Buyer agrees to pay freight, insurance and any related expenses", "all shipping
# costs shall be paid by the Buyer"): the allocation of costs, not the duty to pay the price.
CARRIAGE_COSTS = (r"\b(?:pay|bear)\s+(?:all\s+|any\s+|the\s+)?"
                  r"(?:freight|shipping|carriage|transport(?:ation)?|postage)\b"
                  r"|\b(?:freight|shipping|carriage|transport(?:ation)?)\b[^.;]{0,60}\b(?:costs?|charges?|expenses?)\s+"
                  r"(?:shall|will|must)\s+be\s+(?:paid|borne)\s+by\b")
# Each side bearing its own costs ("Each party will pay all costs and expenses that it incurs in negotiating this
# Agreement"): no duty to pay the other side.
OWN_COSTS = (r"\beach\s+(?:party|of\s+the\s+parties)\s+(?:shall|will|must|agrees\s+to)\s+(?:pay|bear)\s+(?:all\s+)?"
             r"(?:of\s+)?(?:(?:its|their|the)\s+)?(?:own\s+)?(?:[\w-]+\s+){0,2}(?:costs|expenses)\b")
# The price of a sale, the buyer's duty to pay: "agrees to purchase ... at a price of $0.01 per share", "each
# Investor will purchase at the Closing ... at a purchase price per share equal to the Purchase Price".
PURCHASE_AT_PRICE = (r"\b(?:agrees?\s+to|will|shall)\s+(?:purchase|buy)\b[^.;]{0,300}?"
                     r"\b(?:at\s+a\s+price|(?:aggregate\s+)?purchase\s+price)\b")
# An excuse for events beyond a side's control ("Neither party is liable for a breach when the breach is a result of
# flood ..."): force majeure, no limit on liability.
EXCUSED_EVENT = (r"\bforce\s+majeure\b|\bbeyond\s+(?:the\s+|its\s+|their\s+|either\s+party's\s+)?(?:reasonable\s+)?"
                 r"control\b|\bliable\b[^.;]{0,120}\b(?:when|where|if|to\s+the\s+extent)\s+(?:the\s+|such\s+|any\s+)?"
                 r"(?:breach|failure|delay|non-?performance)\b[^.;]{0,40}?\b(?:(?:as\s+)?a\s+result\s+of|caused\s+by|"
                 r"due\s+to|attributable\s+to)\b")
# A limit on what one side must refund or repay ("any amount to be refunded will not exceed the damages
# recovered") is no cap on liability when the sentence names no liability.
REFUND_LIMIT = r"^(?!.*\bliab).*\b(?:to\s+be|is|are|be)\s+(?:refunded|repaid|reimbursed)\b"
# A side's right to terminate the agreement itself ("Either party may terminate this Agreement if ...") outranks an
# ending that follows from something else ("if the Main Contract is terminated for any reason, this Agreement
# terminates automatically"). Operative rules only (a second core bonus).
PARTY_MAY_TERMINATE = (r"\b(?:either|each|any|a|the\s+other)\s+part(?:y|ies)\s+may\s+(?:\w+\s+){0,2}terminate\s+"
                       r"(?:this|these|the)\s+(?:agreement|contract|terms)\b")

# A non-disclosure duty in the passive voice ("Confidential Information shall not be disclosed to any third
# party", "... shall not be used or disclosed", "... shall not be disclosed, used or reproduced"): the
# information is the subject, not the recipient. Shared with the operative rules.
PASSIVE_NONDISCLOSURE = (r"\b(?:shall|will|must|may)\s+not\s+be\s+(?:[\w-]+,?\s+(?:(?:or|and)\s+)?){0,3}?"
                         r"(?:disclosed|divulged|revealed)\b")
# An indemnity denied ("shall have no obligation to indemnify or hold harmless the Company", "will not indemnify"):
# no promise to indemnify, so a sentence that also excludes liability is still the exclusion.
DENIED_INDEMNITY = (r"\b(?:no|not\s+(?:\w+\s+){0,2}any)\s+(?:obligation|duty|requirement)\s+to\s+(?:\w+\s+){0,2}"
                    r"indemnif|\b(?:shall|will|need|must)\s+not\s+(?:\w+\s+){0,2}indemnif")
# A restriction on both sides named in turn: "Neither ADAMS GOLF nor CONSULTANT shall have the right to grant
# sublicenses hereunder or to assign, alienate or otherwise transfer any of its rights", "Neither party shall
# assign this Agreement".
NEITHER_MAY_ASSIGN = (r"\bneither\b[^.;]{0,80}?\b(?:shall|will|may|can)\s+(?:(?:have\s+(?:the\s+)?"
                      r"(?:right|power|authority)|be\s+(?:entitled|permitted|allowed))\b[^.;]{0,80}?\bto\s+"
                      r"(?:\w+,?\s+(?:or\s+)?){0,3}|(?:\w+\s+){0,2})(?:assign|transfer)\b")
# The non-disclosure duty as the second half of a sentence: "...; nor shall a party or its employees disclose any
# such Proprietary Information of the other".
NOR_DISCLOSE = r"\bnor\s+(?:shall|will|may|must)\s+(?:\w+\s+){0,5}disclose\b"
# Keeping in confidence with another word joined: "keep in trust and confidence", "hold in trust and confidence".
IN_CONFIDENCE = r"in\s+(?:(?:the\s+)?strict(?:est)?\s+|trust\s+and\s+)?confidence"
# A duty not to disclose set as a lead-in and its list: "You will neither during Your employment nor at any time
# after ..., directly or indirectly: (a) use for personal purposes ...; or (b) disclose to any person ...". The
# items carry the verbs; the lead-in's "not" or "neither" carries the duty.
# Or the lead-in names who promises and the first item says what: "The Receiving Party agrees: (i) not to divulge
# to any third person any such Confidential Information; (ii) ...".
LIST_NOT_DISCLOSE = (r"\b(?:will|shall|must|agrees?\s+to|undertakes?\s+to)\s+(?:not|neither)\b[^.:]{0,300}:\s"
                     r"[^.]{0,600}?\b(?:disclose|divulge)\b|"
                     r"\b(?:agrees?|undertakes?|covenants?)(?:\s+(?:that\s+it\s+will|as\s+follows))?:\s*"
                     r"(?:\(?[a-z]{1,2}\)|\(?[ivx]{1,4}\))?\s*not\s+to\s+(?:\w+\s+){0,2}(?:disclose|divulge)\b")


# What a cap is limited to: an amount, a sum named in words ("FIVE HUNDRED U.S. DOLLARS"), the fees or a formula.
CAP_AMOUNT = (r"(?:the\s+)?(?:amount|fees|sums?|total|aggregate|greater|lesser|charges|price|(?:US\s?)?\$|€|£|\d|"
              r"(?:[a-z]+[\s-]+){1,4}(?:u\.?s\.?\s+)?(?:dollars|euros?|pounds))")
# The duty to pay denied: "will have no obligation to pay any fees invoiced late", "is not under any obligation to
# make any payment", "Member shall not be obligated (required) to pay for any such use".
PAY_DENIED = (r"\b(?:no|not\s+(?:\w+\s+){0,2}any)\s+(?:obligation|duty|liability|requirement)\s+to\s+"
              r"(?:pay|make\s+(?:any\s+)?payments?)\b|"
              r"\bnot\s+(?:be\s+)?(?:obligated|obliged|required|liable)\s+to\s+(?:pay|make\s+(?:any\s+)?payments?)\b")


# "our liability to you ... shall furthermore be limited to the total amount of the fees you paid", or, further on
# in a long sentence, limited to an amount: "THE TOTAL, CUMULATIVE LIABILITY OF EACH PARTY ARISING OUT OF ... SHALL
# BE LIMITED TO FIVE HUNDRED U.S. DOLLARS ($500.00)".
LIABILITY_LIMITED_TO = (r"\bliability\b[^.;]{0,80}\b(?:is|are|shall|will)\s+(?:\w+\s+){0,2}limited\s+to\b|"
                        rf"\bliability\b[^.;]{{0,300}}\b(?:is|are|shall|will)\s+(?:\w+\s+){{0,2}}limited\s+to\s+{CAP_AMOUNT}")
# Confidentiality denied: "will (generally) not keep the details of the Work confidential", "will not be treated as
# confidential" (an adverb may sit between; "shall not disclose and keep confidential" is still the duty).
CONFIDENTIAL_DENIED = (r"\b(?:not|never)\s+(?:\w+ly\s+)?(?:be\s+)?(?:keep|hold|treat|regard|consider|kept|held|"
                       r"treated|regarded|considered)\b[^.;]{0,80}\b(?:confidential|in\s+confidence|secret)\b")


# What makes a sentence read as a contract's and not as a manual's: it names an instrument or a side,
# or speaks in a contract's modal voice. "gpg-agent will then terminate itself" and "the value is
# capped at 60 seconds" carry a kind's words but none of these, so in a case file that holds
# technical material beside its agreements they are not clauses.
_LEGAL_VOICE = re.compile(r"\b(?:agreement|contract|licen[cs]e[ed]?s?|licensor|licensee|part(?:y|ies)|customer|"
                          r"client|vendor|supplier|provider|recipient|discloser|company|you|your|user|buyer|seller|"
                          r"consultant|contractor|employee|employer|purchaser|subscriber|lessor|lessee|landlord|tenant|"
                          r"borrower|lender|guarantor|proprietary\s+information|in\s+confidence|"
                          # public-sector sides ("the Province", "the Crown", "the Bidder") and litigation
                          # ("no action may be brought against Us")
                          r"province|crown|commonwealth|ministry|bidders?|tenderers?|proponents?|"
                          r"(?:actions?|claims?|proceedings?|suits?)\s+(?:\w+\s+){0,3}brought|"
                          r"shall|hereby|hereunder|herein|hereof|thereof|pursuant|terms|order\s+form|statement\s+of\s+work|"
                          r"liab(?:le|ility)|damages|indemn\w*|warrant\w*|invoices?|fees?|royalt\w*|"
                          r"confidential\w*|governed|jurisdiction|assign\w*)\b", re.I)


def legal_voice(text: str) -> bool:
    """Whether a sentence or heading speaks as a contract does (``_LEGAL_VOICE``)."""
    return _LEGAL_VOICE.search(text) is not None
