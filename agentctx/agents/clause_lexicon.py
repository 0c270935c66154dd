"""What each clause kind looks like: the words of its headings and the language of its operative sentences.

A small lexicon per kind of the review taxonomy, written from how contracts and licences
are drafted, not from any one document:

* ``title``: words of a section heading that announces the kind ("GOVERNING LAW",
  "8.1 Liability Caps", "Term and Termination").
* ``strong``: operative language that carries the kind ("shall be governed by the laws
  of", "shall not be liable", "may not assign ... without ... consent"). Each distinct
  pattern that matches counts its weight (1 unless stated; naming the governing law
  counts 1.5, naming only the courts 0.6, so the law's sentence is quoted before the
  venue's), at most 2.5 in all.
* ``weak``: related words that support but do not carry it ("jurisdiction", "liable").
  Each counts 0.3 (at most 0.6).
* ``negative``: look-alike language of another clause ("organised under the laws of" is
  not a governing-law clause; "survive termination" is not a termination clause;
  "royalty-free" is not a payment clause). Each counts -1.

:func:`body_evidence` scores a sentence on them; :func:`.clause_candidates.score_unit` adds the
section's heading path (a heading match weighs more than a body match) into one number per
sentence; the thresholds that turn it into "found" / "not found" live in :mod:`.clause_candidates`.
Named patterns that several kinds or the operative rules share live in :mod:`.clause_patterns`.
Patterns match the sentence with its whitespace collapsed, case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .clause_patterns import (
    ASSIGN_CONDITION,
    CARRIAGE_COSTS,
    CONFIDENTIAL_DENIED,
    CONSENT,
    DENIED_INDEMNITY,
    DURATION_UNTIL_TERMINATED,
    EXCUSED_EVENT,
    FEE_TAKEN,
    IN_CONFIDENCE,
    LIABILITY_LIMITED_TO,
    LIST_NOT_DISCLOSE,
    MAKE_PAYMENT,
    MAY_BE_TRANSFERRED_ONLY,
    MAY_END,
    NEITHER_MAY_ASSIGN,
    NET_TERMS,
    NOR_DISCLOSE,
    NOT_MODAL,
    OWN_COSTS,
    PAID_BY_WHEN,
    PASSIVE_NONDISCLOSURE,
    PAY_DENIED,
    PAY_SCHEDULE,
    PROMISE_TO_PAY_SIDES,
    PURCHASE_AT_PRICE,
    REFUND_LIMIT,
    TO_BE_PAID,
    TO_RECEIVE_PAY,
)

__all__ = ["KindLexicon", "LEXICON", "normalize", "title_matches", "body_evidence"]


def _rx(*patterns: str) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p, re.I) for p in patterns)


def _weighted(*patterns: str | tuple[str, float]) -> tuple[tuple[re.Pattern, float], ...]:
    """Operative patterns with their weights (1 unless given)."""
    return tuple((re.compile(p, re.I), 1.0) if isinstance(p, str) else (re.compile(p[0], re.I), p[1])
                 for p in patterns)


@dataclass(frozen=True)
class KindLexicon:
    kind: str
    title: tuple[re.Pattern, ...]
    strong: tuple[tuple[re.Pattern, float], ...]
    weak: tuple[re.Pattern, ...] = ()
    negative: tuple[re.Pattern, ...] = ()
    title_negative: tuple[re.Pattern, ...] = ()  # headings under which the kind is not stated


LEXICON: dict[str, KindLexicon] = {k.kind: k for k in [
    KindLexicon(
        "parties",
        title=_rx(r"\bparties\b", r"\bpreamble\b"),
        strong=_weighted(
            r"\b(?:is|are)\s+(?:made\s+|entered\s+into\s+|concluded\s+)?(?:(?:on|as\s+of)\s+[^.;]{3,40}?\s+)?"
            r"(?:by\s+and\s+)?between\b",
            r"\bagreement\b[^.;]{0,160}\bbetween\b[^.;]{2,240}\band\b",
            r"\bby\s+and\s+between\b",
            r"\bbetween\s+you\b",
            # "The parties to these Terms (the "Agreement") are His Majesty ... (the "Province") and the Subscriber"
            r"\bparties\s+to\s+(?:this|these|the)\b[^.;]{0,200}?\b(?:are|is)\b[^.;]{2,300}\band\b",
            # an offer-form opening: "Licensor is willing to license the Software to you on these terms"
            r"\b(?:is|are)\s+willing\s+to\s+(?:grant|licen[cs]e|provide|offer|sell|supply|make)\b[^.;]{0,60}\byou\b",
            # a plain-language acceptance that names the other side: "you must agree to these terms with X"
            r"\bagree(?:s|ing)?\s+to\s+(?:these|this|the)\s+(?:\w+\s+){0,2}(?:terms|agreement|conditions)\s+with\b",
            # a promissory note names its sides in the promise: its maker, defined, "promises to pay to" the
            # payee, defined ("Acme (the "Issuer") promises to pay to the holder (the "Noteholder") ...")
            PROMISE_TO_PAY_SIDES,
        ),
        weak=_rx(r"\b(?:hereinafter|referred\s+to\s+(?:below\s+|herein\s+|hereafter\s+)?as)\b",
                 r"\beach\s+a\s+[\"\u201c]?party\b"),
        negative=_rx(r"\borgani[sz]ed\s+(?:and\s+existing\s+)?under\s+the\s+laws\b", r"\bintends?\s+that\b",
                     r"\bincorporated\s+(?:in|under)\b",
                     # the integration clause ("the entire agreement between you and X and supersedes ...")
                     # names both sides but is not where they are named
                     r"\bentire\s+(?:agreement|understanding|terms)\b", r"\bsupersedes?\b",
                     # its plain-language wordings: "these terms embody all the terms of agreement between you
                     # and X", "entirely replace any other agreements"
                     r"\bembod(?:y|ies)\s+(?:all|the\s+(?:entire|whole|complete))\b",
                     r"\breplaces?\s+(?:any|all)\s+(?:other|prior|previous|earlier)\s+(?:\w+\s+)?(?:agreements?|"
                     r"understandings?)\b"),
    ),
    KindLexicon(
        "term",
        title=_rx(r"\bterm\b(?!s)(?!\s+of\s+(?:use|service))", r"\bduration\b", r"\brenewal\b",
                  r"\beffective\s+date\b", r"\bperiod\s+of\s+(?:the\s+)?agreement\b"),
        strong=_weighted(
            r"\b(?:shall|will|to)\s+(?:remain|continue)\s+in\s+(?:full\s+)?(?:force|effect)\b",
            r"\bcontinues?\s+(?:in\s+(?:full\s+)?(?:force|effect)\s+)?(?:for|until)\b",
            r"\b(?:commences?|starts?|begins?)\s+on\b",
            r"\b(?:shall\s+|will\s+)?(?:become|becomes|is|be)\s+effective\s+(?:on|upon|as\s+of|from|until)\b",
            r"\bis\s+effective\s+until\b",
            r"\b(?:initial|renewal)\s+(?:term|period)\b",
            # not "breached a term of this Agreement" (a provision of it)
            r"(?<!\ba\s)(?<!\bany\s)(?<!\beach\s)(?<!\bevery\s)(?<!\bone\s)"
            r"\bterm\s+of\s+(?:this|the)\s+(?:agreement|licen[cs]e|mnda)\b",
            r"\bfor\s+(?:a|an\s+initial)\s+(?:term|period)\s+of\b",
            r"\b(?:duration|(?:legal\s+)?term)\s+of\s+(?:the\s+)?(?:copyright|protection|the\s+economic\s+rights)",
            r"\buntil\s+(?:it\s+is\s+|earlier\s+)?terminated\b",
            r"\b(?:expires?|expiry)\s+(?:at|on|after|upon)\b",
            r"\brenew(?:s|ed)?\s+automatically\b|\bautomatically\s+renew",
            r"\bnever\s+expires?\b",
            # the agreement as the subject of its own duration: "This contract stays in place and need not be
            # renewed", "This Agreement remains in force until ..." (not "the remainder of this Agreement shall
            # remain in force", a severability clause)
            r"(?<!\bof\s)\b(?:this|the)\s+(?:agreement|contract|licen[cs]e|terms)\s+(?:stays|remains|(?:shall|will)\s+"
            r"(?:stay|remain))\s+in\s+(?:full\s+)?(?:place|force|effect)\b",
            # "shall continue to bind you for so long as you make use of the Service"
            r"\bcontinues?\s+to\s+(?:bind|apply|be\s+binding)\b[^.;]{0,80}\b(?:(?:so|as)\s+long\s+as|until)\b",
        ),
        weak=_rx(r"\bexpir(?:e|es|y|ation)\b", r"\beffective\s+date\b", r"\bperpetual\b", r"\bone\s+year\b"),
        negative=_rx(r"\bsurviv", r"\bterms?\s+of\s+(?:payment|use)\b", r"\bpayment\s+terms?\b"),
    ),
    KindLexicon(
        "payment",
        title=_rx(r"\bpayments?\b", r"\bfees?\b", r"\bcharges?\b", r"\binvoic", r"\bpric(?:e|es|ing)\b",
                  r"\btaxes\b", r"\bcompensation\b", r"\broyalt(?:y|ies)\b", r"\bremuneration\b", r"\bsalary\b"),
        strong=_weighted(
            r"\b(?:shall|will|must|agrees?\s+to|to)\s+pay\b",
            r"\bpayable\b",
            r"\binvoice[sd]?\b",
            r"\bfees?\s+(?:set\s+out|specified|stated|are|is|shall|will|for|payable)\b",
            r"\bcharges?\b[^.;]{0,60}\b(?:based\s+on|invoice|payable|apply)\b",
            r"\bpurchases?\b[^.;]{0,40}\blicen[cs]e\b",
            # the price of a sale ("agrees to purchase ... at a price of $0.01 per share"): the buyer's duty to pay
            PURCHASE_AT_PRICE,
            r"\blate\s+payments?\b",
            # "keep using the service by paying in advance", "billed in advance": when payment falls due
            r"\b(?:pay(?:s|ing|able)?|paid|billed|charged)\s+(?:\w+\s+){0,2}in\s+advance\b",
            r"\bpayment\s+(?:terms?|is\s+due|shall\s+be\s+made|of\s+(?:the\s+)?fees)\b",
            # "Payment of the purchase price shall be made ...": the duty named by what is paid
            r"\bpayment\s+of\s+(?:the\s+)?(?:\w+\s+){1,3}(?:shall|will|must)\s+be\s+made\b",
            # a sponsor, agent or platform paid by keeping its fee out of the money it handles: "may debit
            # administrative fees from the fund", "deducts its commission from each sale"
            FEE_TAKEN,
            PAY_SCHEDULE,
            TO_BE_PAID,  # "You shall be paid a gross annual salary of ...": an employment agreement's duty to pay
            TO_RECEIVE_PAY,  # "I will receive ... remuneration as listed below": the payee's side again
            MAKE_PAYMENT,  # "shall make a contribution ... in the amount shown in Exhibit A"
            NET_TERMS,  # "Terms are net cash upon delivery": a sale's payment terms
            PAID_BY_WHEN,  # "50% of the order cost must be paid on placement of the order": instalments
        ),
        weak=_rx(r"\bfees?\b", r"\bprice\b", r"\bcharges?\b", r"\btax(?:es)?\b", r"\brefund\b"),
        negative=_rx(r"\broyalty[- ]free\b", r"\bfree\s+of\s+charge\b", r"\bno[- ]charge\b",
                     r"\bwithout\s+(?:a\s+)?fee\b",
                     r"\bwithout\s+(?:the\s+)?payment\b", r"\bat\s+no\s+(?:cost|charge)\b", r"\bcharge\s+a\s+fee\b",
                     r"\bcopying\s+fee\b", r"\battorneys?'?\s+fees\b", r"\blegal\s+fees\b",
                     r"\binsurance\b", r"\brecruitment\s+fee\b",
                     r"\bpay\b[^.;]{0,40}\b(?:damages|settlements?|costs\s+and\s+damages)\b",
                     # bookkeeping named in a list of activities, not a duty to pay
                     r"\baccounts?\s+(?:payable|receivable)\b",
                     # the duty denied: "Customer will have no obligation to pay any fees that Provider invoices
                     # more than 120 days after ...", "is not under any obligation to make any payment"
                     # "is not under any obligation to make any payment", "shall not be obligated to pay for ..."
                     PAY_DENIED,
                     OWN_COSTS, CARRIAGE_COSTS),
        title_negative=_rx(r"\binsurance\b", r"\bdefinitions?\b"),
    ),
    KindLexicon(
        "termination",
        title=_rx(r"\bterminat", r"\bcancell?ation\b",
                  r"\bend(?:ing)?\s+(?:of\s+)?(?:the|this|our)\s+(?:agreement|relationship|contract)\b"),
        strong=_weighted(
            r"\bmay\s+(?:\w+\s+){0,2}terminate\b",
            r"\b(?:will|shall)\s+(?:\w+\s+){0,2}terminate\b",
            r"\bterminates?\s+automatically\b",
            r"\b(?:is|be|are)\s+(?:\w+\s+)?terminated\b",
            # "has the right to suspend or terminate your account": a service's terms end the user's account
            r"\bright\s+to\s+(?:\w+\s+(?:or|and/or)\s+)?terminate\b",
            r"\bterminate\s+(?:this|these|the)\s+(?:agreement|licen[cs]e|mnda|contract|(?:use\s+)?terms)\b",
            r"\btermination\s+(?:for|of\s+(?:this|the)\s+(?:agreement|licen[cs]e))\b",
            # "shall be entitled to summarily terminate", "entitled ... to: cancel these Use Terms"
            r"\b(?:entitled|permitted)\s+to\s+(?:\w+\s+)?(?:terminate|cancel)\b",
            r"\bcancel\s+(?:this|these|the)\s+(?:agreement|licen[cs]e|contract|(?:use\s+)?terms)\b",
            # plain-language drafting ends the agreement: "either you or the company may end the agreement"
            MAY_END,
        ),
        weak=_rx(r"\bupon\s+termination\b", r"\btermination\b", r"\bmaterial\s+breach\b"),
        negative=_rx(r"\bsurviv", r"\bforce\s+majeure\b", r"\binstallation\s+process\b",
                     r"\b(?:expiration|expiry)\s+or\s+termination\b", r"\bdoes\s+not\s+affect\b",
                     # a duration, not a right to end it: "will continue until the Agreement expires or is
                     # terminated", "until terminated", "unless sooner terminated" (where no side "may terminate")
                     DURATION_UNTIL_TERMINATED),
        title_negative=_rx(r"\bsurvival\b", r"\bforce\s+majeure\b"),
    ),
    KindLexicon(
        "liability_cap",
        title=_rx(r"\bliabilit(?:y|ies)\b", r"\bdamages\b"),
        strong=_weighted(
            r"\b(?:shall|will|is|are|be)\s+not\s+(?:be\s+)?liable\b",
            # "will not be held liable"; "shall not be liable" is the pattern above, counted once
            r"(?<!shall\s)(?<!will\s)\bnot\s+be\s+(?:held\s+)?liable\b|\bnot\s+be\s+held\s+liable\b",
            r"\bneither\b[^.;]{0,100}\b(?:will|shall|is|are)\s+(?:be\s+)?(?:held\s+)?liable\b",
            r"\bin\s+no\s+event\b[^.]{0,300}\bliab",
            r"\bunder\s+no\s+circumstances\b[^.]{0,300}\bliab",
            r"\b(?:total|aggregate|entire|maximum|cumulative)\s+(?:\w+\s+){0,3}liability\b",
            r"\bliability\b[^.;]{0,80}\b(?:shall|will|does|is|not\s+to)\s+not\s+exceed\b|\bnot\s+exceed\b",
            # "our liability to you ... shall furthermore be limited to the total amount of the fees you paid"
            LIABILITY_LIMITED_TO,
            r"\bcapped\s+at\b|\bliability\s+cap\b|\bthe\s+cap\s+(?:equals|is)\b",
            r"\b(?:indirect|incidental|special|consequential|exemplary|punitive)\b[^.]{0,80}\bdamages\b",
            r"\blimitation\s+of\s+liability\b",
            r"\bno\s+liability\b",
            # "No action may be brought by any person against Us for any loss or damage", "no action shall lie"
            r"\bno\s+(?:action|claim|proceeding|suit)s?\s+(?:may|shall|will|can)\s+(?:be\s+(?:brought|made|"
            r"commenced|taken)|lie)\b[^.;]{0,160}\b(?:loss|damages?|injury|liability)\b",
            r"\bdisclaims?\b[^.]{0,120}\bliabilit",
        ),
        weak=_rx(r"\bliab(?:le|ility)\b", r"\bdamages\b"),
        negative=_rx(r"\btake\s+reasonable\s+steps\s+to\s+(?:reduce|mitigate)\b", r"\binsurance\b",
                     # an indemnity is not the cap, but an indemnity denied beside an exclusion ("shall not be
                     # liable ..., and shall have no obligation to indemnify") is no indemnity
                     rf"^(?!.*(?:{DENIED_INDEMNITY})).*\bindemnif", REFUND_LIMIT, EXCUSED_EVENT),
        title_negative=_rx(r"\binsurance\b", r"\bforce\s+majeure\b"),
    ),
    KindLexicon(
        "indemnity",
        title=_rx(r"\bindemn", r"\bhold\s+harmless\b"),
        strong=_weighted(
            r"\bindemnif(?:y|ies)\b",
            r"\bindemnity\b(?!\s+insurance)",
            r"\bhold\s+(?:\w+\s+){0,3}harmless\b",
            r"\bdefend\b[^.;]{0,120}\b(?:against|from)\b[^.;]{0,80}\bclaims?\b",
        ),
        weak=_rx(r"\bindemnif(?:ied|ying|ication)\b", r"\bthird[- ]party\s+claims?\b"),
        negative=_rx(r"\bindemnity\s+insurance\b", r"\bcap\b[^.]{0,40}\bdoes\s+not\s+apply\b",
                     r"\bexcept\s+as\s+set\s+forth\b", DENIED_INDEMNITY),
        title_negative=_rx(r"\binsurance\b"),
    ),
    KindLexicon(
        "confidentiality",
        title=_rx(r"\bconfidential", r"\bnon-?disclosure\b", r"\bsecrecy\b"),
        strong=_weighted(
            r"\bconfidential\s+information\b[^.;]{0,160}\b(?:shall|will|must|may)\b",
            rf"\b(?:keep|hold|maintain|treat)\b[^.;]{{0,80}}\b(?:confidential|{IN_CONFIDENCE}|secret)\b",
            # "protect" as a duty ("will use reasonable efforts to protect the confidential information"), not as
            # the purpose of a permission ("to the extent needed to protect confidential information, X may redact")
            r"\b(?:will|shall|must|agrees?\s+to|undertakes?\s+to)\s+(?:\w+\s+){0,4}protect\b[^.;]{0,80}"
            r"\b(?:confidential|in\s+confidence|secret)\b",
            # "does regard the following as confidential:", "considers the Client's data to be confidential"
            r"\b(?:regard|consider)s?\b[^.;]{0,80}\b(?:as|to\s+be)\s+(?:strictly\s+)?confidential\b",
            # "we'll maintain (preserve) the confidentiality of everything you give us"
            r"\b(?:keep|maintain|preserve)\s+(?:the\s+)?confidentiality\s+of\b",
            r"\b(?:not|never)\s+(?:to\s+)?(?:use\s+or\s+)?(?:disclose|divulge)\b",  # "(i) not to divulge to any ..."
            # the duty in the passive: "Proprietary Information shall not be disclosed, used or reproduced"
            PASSIVE_NONDISCLOSURE,
            NOR_DISCLOSE,  # "...; nor shall a party ... disclose any such Proprietary Information"
            LIST_NOT_DISCLOSE,  # "You will neither ...: (a) use ...; or (b) disclose ..." (a lead-in with its items)
            r"\bconfidentiality\s+obligations?\b",
            r"\bnon-?disclosure\b",
        ),
        weak=_rx(r"\bconfidential\b", r"\bdisclos"),
        negative=_rx(r"\bnon-?confidential\b", r"\bbenchmark",
                     # account security ("keep your password secret") guards the user's own access, not the
                     # other side's information
                     r"\b(?:passwords?|passphrases?|credentials|api\s+keys?|access\s+tokens?|"
                     r"passcodes?|(?:log-?in|log-?on|sign-?in|log|account|profile)\s+(?:details|information))\b",
                     CONFIDENTIAL_DENIED,
                     # the scope of a permission: "to the extent needed to protect confidential information, X may
                     # redact ..."
                     r"\bto\s+the\s+extent\s+(?:necessary|needed|required|reasonably\s+necessary)\s+to\s+protect\b",
                     # a side's right to hold back information ("may redact the copy", "may restrict access to data
                     # if ... would impact its confidentiality obligations"), not a duty over the other side's
                     r"\bmay\s+(?:\w+\s+){0,2}(?:restrict|redact|withhold)\b"),
        title_negative=_rx(r"\bdefinitions?\b", r"\bglossary\b"),
    ),
    KindLexicon(
        "governing_law",
        title=_rx(r"\bgoverning\s+law\b", r"\bapplicable\s+law\b", r"\bchoice\s+of\s+law\b", r"\bjurisdiction\b",
                  r"\bvenue\b", r"\blitigation\b", r"\bchosen\s+courts\b"),
        strong=_weighted(
            (r"\bgoverned\s+(?:\w+\s+){0,3}by\b[^.;]{0,80}\blaws?\b", 1.5),  # "governed in all respects by"
            r"\bconstrued\b[^.;]{0,60}\b(?:in\s+accordance\s+with|under)\b[^.;]{0,40}\blaws?\b",
            r"\blaws?\s+of\s+(?:the\s+)?(?:state|commonwealth|republic|province|kingdom|united|federal|"
            r"england|france|germany|ireland|japan|india|singapore|switzerland|belgium|delaware|california|"
            r"new\s+york|the\s+country)\b",
            (r"\bexclusive\s+jurisdiction\b", 0.6),
            (r"\b(?:courts?|tribunals?)\s+(?:of|in|located|sitting|having)\b", 0.6),
            (r"\bvenue\b", 0.6),
            (r"\bsubmits?\s+to\s+the\s+(?:\w+\s+)?jurisdiction\b", 0.6),
            # the agreement itself put under a forum, where no law is named: "this contract is a legal document
            # under exclusive jurisdiction of Washington, D.C. courts" (that sentence is all there is)
            r"\b(?:agreement|contract|terms|licen[cs]e)\b[^.;]{0,60}\b(?:under|subject\s+to)\s+(?:the\s+)?"
            r"(?:(?:non-?)?exclusive\s+)?jurisdiction\s+of\b",
            r"\bgoverning\s+law\b",
            r"\b(?:law|laws)\s+of\s+(?:the\s+)?(?:country|jurisdiction|state)\s+(?:where|in\s+which)\b",
        ),
        weak=_rx(r"\bjurisdiction\b", r"\bunited\s+nations\s+convention\b", r"\barbitration\b", r"\bdisputes?\b"),
        negative=_rx(r"\borgani[sz]ed\s+(?:and\s+existing\s+)?under\b", r"\bincorporated\s+under\b",
                     r"\bexisting\s+under\s+the\s+laws\b", r"\bexport\b", r"\bconcerning\s+[A-Z]",
                     r"\bprohibited\s+by\s+law\b"),
        title_negative=_rx(r"\bexport\b"),
    ),
    KindLexicon(
        "assignment",
        title=_rx(r"\bassign(?:ment|ability)?\b", r"\btransfers?\b", r"\bsuccessors?\b", r"\bchange\s+of\s+control\b"),
        strong=_weighted(
            rf"\bassign(?:ed|able|ment)?\b[^.;]{{0,160}}\bwithout\b[^.;]{{0,60}}\b{CONSENT}\b",
            rf"\b{NOT_MODAL}\s+(?:\w+\s+){{0,3}}(?:assign|transfer)\b",
            ASSIGN_CONDITION,
            # the consent set between the duty and the verb: "will not, without the prior written consent of the
            # Province, assign, either directly or indirectly, this Agreement"
            r"\b(?:may|shall|will|must|can)\s*not\s*,?\s+(?:without|except\s+with)\b[^.;]{0,120}\bconsent\b"
            r"[^.;]{0,80}?,\s*(?:\w+\s+){0,2}(?:assign|transfer)\b",
            # "shall not have the right or ability to assign", "will not be entitled to transfer"
            r"\b(?:(?:may|shall|will|must|can)\s*not\s+(?:have|be\s+(?:entitled|permitted|allowed))|has\s+no|"
            r"shall\s+have\s+no)\b[^.;]{0,40}\bto\s+(?:\w+,?\s+(?:or\s+)?){0,2}(?:assign|transfer)\b",
            # "may not sell, assign or delegate any rights": a list of verbs, then what is assigned
            r"\b(?:may|shall|will|must|can)\s*not\s+(?:\w+,\s+){1,3}(?:\w+\s+)?(?:assign|transfer)\b"
            r"[^.;]{0,60}\b(?:agreement|rights?|obligations?|licen[cs]es?)\b",
            r"\bnot\s+(?:be\s+)?(?:assignable|transferable|assigned|transferred)\b",
            MAY_BE_TRANSFERRED_ONLY,
            NEITHER_MAY_ASSIGN,  # "Neither A nor B shall have the right ... to assign"
            r"\bnon-?(?:assignable|transfera?ble)\b",
            r"\bmay\s+(?:freely\s+)?(?:assign|transfer)\s+(?:this|the|its|any|all|licensee's)\s+(?:\w+\s+){0,2}"
            r"(?:agreement|licen[cs]es?|rights?|obligations?|program|order\s+forms?|contract)\b",
            r"\bchange\s+of\s+control\b",
            r"\bassign(?:s|ed)?\s+(?:this|the)\s+(?:agreement|licen[cs]e|mnda)\b",
            # an employer's right to move the contract: "may assign your employment to any group company"
            r"\bassign\s+(?:your|the|his|her|their|its)\s+(?:employment|engagement)\s+to\b",
            r"\b(?:this|the)\s+(?:agreement|licen[cs]e)\b[^.;]{0,80}\b(?:assigned|transferred)\b",
        ),
        weak=_rx(r"\bassign(?:s|ed|ment)?\b", r"\bsuccessors?\b", r"\btransfer\b"),
        negative=_rx(r"\bhereby\s+assigns?\b", r"\bright,\s+title\b", r"\bpersonal\s+data\b", r"\bkey\s+personnel\b",
                     # subcontracting alone is not assignment; "assign, transfer, or subcontract" is
                     r"^(?!.*\bassign).*\bsubcontract",
                     # assigning work to a person is no assignment of the agreement: "may assign different duties
                     # to you", "won't assign you tasks you cannot perform"
                     # (where the sentence names no agreement or obligations: "may not assign or delegate work
                     # under this Agreement" stays a restriction)
                     r"^(?!.*\b(?:agreement|contract|obligations?)\b).*\bassign\s+(?:\w+\s+){0,3}"
                     r"(?:duties|tasks|work|responsibilities|projects?|roles?)\b"),
        title_negative=_rx(r"\bdata\b", r"\bpersonnel\b"),
    ),
]}

_WS = re.compile(r"\s+")
_BOX = re.compile(r"\s*\*\s*\n\s*\*\s*")


def normalize(text: str) -> str:
    """A sentence as the patterns read it: box borders and whitespace runs collapsed."""
    return _WS.sub(" ", _BOX.sub(" ", text)).strip()


def title_matches(kind: str, title: str) -> bool:
    lex = LEXICON[kind]
    return bool(title) and any(p.search(title) for p in lex.title) \
        and not any(p.search(title) for p in lex.title_negative)


def body_evidence(kind: str, sentence: str) -> tuple[float, list[str]]:
    """(body score, names of the patterns that matched) of one normalised sentence."""
    lex = LEXICON[kind]
    strong = [(p.pattern, w) for p, w in lex.strong if p.search(sentence)]
    weak = [p.pattern for p in lex.weak if p.search(sentence)]
    neg = [p.pattern for p in lex.negative if p.search(sentence)]
    score = min(sum(w for _, w in strong), 2.5) + 0.3 * min(len(weak), 2) - 1.0 * len(neg)
    return score, [p for p, _ in strong] + [f"~{w}" for w in weak] + [f"-{n}" for n in neg]
