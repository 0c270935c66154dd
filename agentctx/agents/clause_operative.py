"""Which sentence of a clause is its operative one, and which are related provisions beside it.

A section that carries a kind usually holds more than its operative sentence: a limitation of
liability holds the cap and the waiver of consequential damages; a payment section the duty
to pay and the handling of disputes, late fees and taxes; a termination section the grounds
and the effect of termination; a governing-law section the law and the courts. The review
cites one sentence, and the lawyer wants the operative one (docs/REVIEW.md, "The operative
sentence of each kind"). Per kind:

* ``core``: the language of the operative sentence itself (the cap's amount or formula,
  "will pay ... within 30 days", "governed by the laws of", "will not use or disclose ...").
  Each distinct pattern adds ``CORE_BONUS``, at most ``MAX_CORE``.
* ``related``: the language of a neighbouring provision that is not it (the damages waiver,
  payment disputes, "upon termination", the forum). One or more subtract ``RELATED_PENALTY``
  once; with ``related_unless_core`` only when no core pattern is in the sentence (a law
  sentence that also names the courts is still the law sentence).
* ``not_related``: language that shows a sentence is not the related provision though it
  carries its words: an exclusion of "direct, indirect, ... consequential damages" excludes all
  liability, where the waiver beside a cap leaves direct damages to the cap.

:func:`operative_adjustment` is added to a sentence's ranking score only: whether a kind is
found at all still rests on its heading and operative language (:mod:`.clause_lexicon`), so a
licence whose only liability clause is a damages waiver still reports that waiver.
Patterns are drafting knowledge, read on the normalised sentence, case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .clause_patterns import (
    ASSIGN_CONDITION,
    CAP_AMOUNT,
    CARRIAGE_COSTS,
    CONSENT,
    COST_OF_REPAIR,
    DUE_ON_DELIVERY,
    FEE_TAKEN,
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
    PARTY_MAY_TERMINATE,
    PASSIVE_NONDISCLOSURE,
    PAY_SCHEDULE,
    PURCHASE_AT_PRICE,
    TO_BE_PAID,
    TO_RECEIVE_PAY,
)

__all__ = ["OperativeLexicon", "OPERATIVE", "CORE_BONUS", "MAX_CORE", "RELATED_PENALTY", "DEFINITION",
           "operative_adjustment"]

CORE_BONUS = 0.75
MAX_CORE = 1.5
RELATED_PENALTY = 0.75


def _rx(*patterns: str) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p, re.I) for p in patterns)


@dataclass(frozen=True)
class OperativeLexicon:
    kind: str
    core: tuple[re.Pattern, ...] = ()
    related: tuple[re.Pattern, ...] = ()
    related_unless_core: bool = False
    not_related: tuple[re.Pattern, ...] = ()


_DAYS = r"\(?\d+\)?\s*(?:business\s+|calendar\s+|working\s+)?days?"
_NUM_DAYS = rf"(?:[a-z]+(?:[\s-][a-z]+)?\s+)?{_DAYS}"  # "thirty (30) days", "30 days", "forty-five (45) days"
_MONEY = r"(?:US\s?\$|\$|€|£|USD\s?\d|EUR\s?\d|\b\d[\d,.]*\s*(?:dollars|euros?|pounds)\b)"

OPERATIVE: dict[str, OperativeLexicon] = {k.kind: k for k in [
    OperativeLexicon(
        "liability_cap",
        core=_rx(
            r"\bliab\w*\b[^.]{0,200}\b(?:shall|will|does|do|is|are|to)\s+not\s+exceed\b",
            r"\bliab\w*\b[^.]{0,200}\bexceed\b",  # "in no event will X's total liability ... exceed"
            rf"(?<!not )\blimited\s+to\s+{CAP_AMOUNT}",  # "limited to the fees paid", "to five hundred dollars"
            r"\b(?:greater|lesser)\s+of\b",
            r"\bamounts?\s+(?:actually\s+)?(?:paid|payable|received)\b|\bfees\s+(?:actually\s+)?(?:paid|payable)\b",
            r"\b(?:preceding|prior|previous)\s+(?:\w+\s+)?(?:\(?\d+\)?\s+)?months\b",
            _MONEY,
        ),
        related=_rx(
            r"\b(?:indirect|incidental|special|consequential|exemplary|punitive)\b[^.]{0,80}\bdamages\b",
            r"\blost\s+(?:profits|revenues?|data|savings)\b|\bloss\s+of\s+(?:profits?|revenues?|data|use|goodwill|"
            r"business)\b",
            r"\b(?:essential\s+(?:basis|part|element)|basis\s+of\s+the\s+bargain|allocation\s+of\s+risk)\b",
            r"\b(?:limitations?|exclusions?|cap|limits?)\b[^.]{0,80}\b(?:shall|will|do|does)\s+not\s+apply\b",
            r"\bsome\s+(?:jurisdictions|states)\b",
        ),
        related_unless_core=True,  # the cap with its carve-outs in one sentence is still the cap
        # A terms of service without a cap excludes liability for "any direct, indirect, incidental ...
        # damages": that is the exclusion itself (the operative sentence where no cap exists), not the
        # waiver of consequential damages that sits beside a cap and leaves direct damages to it.
        not_related=_rx(r"\bdirect\s*(?:,|or|and)\s*(?:\w+\s*,\s*)?indirect\b"),
    ),
    OperativeLexicon(
        "payment",
        core=_rx(
            r"\b(?:shall|will|must|agrees?\s+to)\s+(?:promptly\s+)?pay\b",
            # a note's or a bond's maker "promises (undertakes, covenants) to pay" the principal: the duty to pay
            r"\b(?:promises?|undertakes?|covenants?)\s+to\s+(?:promptly\s+)?pay\b",
            rf"\b(?:payable|due|paid)\s+(?:with)?in\s+{_NUM_DAYS}\b",
            # the due date: "within thirty (30) days of the invoice date"; after "due", "payable" or "paid" the pattern
            # above has counted these words already (one phrase counts once)
            rf"(?<!\bdue\s)(?<!\bpaid\s)(?<!\bpayable\s)\bwithin\s+{_NUM_DAYS}\b",
            r"\b(?:pay(?:s|ing|able)?|paid|billed|charged)\s+(?:\w+\s+){0,2}in\s+advance\b",  # the due date too
            r"\b(?:fees?|charges?|prices?)\b[^.;]{0,60}\b(?:are|is|will\s+be|shall\s+be)\s+(?:due|payable|based\s+on|"
            r"invoiced)\b",
            r"\b(?:purchases?|buys?)\b[^.;]{0,40}\blicen[cs]es?\b",
            # the price of a sale: "agrees to purchase ... at a price of $0.01 per share, for an aggregate
            # purchase price of ..." (stock, asset and supply agreements state the duty to pay this way)
            PURCHASE_AT_PRICE,
            FEE_TAKEN,  # the fee kept out of the money handled: how a sponsor or an agent is paid
            PAY_SCHEDULE,  # "we agree to stick to the following payment schedule"
            TO_BE_PAID,  # "You shall be paid a gross annual salary of ...", the payee's side of the duty
            TO_RECEIVE_PAY,  # "I will receive ... other remuneration as listed below", the same from the payee
            MAKE_PAYMENT,  # "shall make a contribution (payment) ...": making a payment is paying
            NET_TERMS,  # "Terms are net cash upon delivery", "net 30 days": the trade terms of a sale
            DUE_ON_DELIVERY,  # "payable upon delivery", "cash upon delivery": when the price falls due
            PAID_BY_WHEN,  # "the balance must be paid prior to shipment": an instalment and when it falls due
            # the basis of the duty by its amount: "... in the amount shown in Exhibit A", "in the amount of $5,000"
            r"\bin\s+the\s+(?:total\s+|aggregate\s+)?amount\s+(?:of|shown|set\s+(?:out|forth)|specified|stated|"
            r"indicated|listed)\b",
        ),
        related=_rx(
            r"\bdisput(?:e|es|ed|ing)\b", r"\blate\s+(?:payments?|fees?|charges?)\b", r"\boverdue\b",
            r"\binterest\b", r"\btax(?:es)?\b|\bwithholding\b|\bvat\b", r"\bsuspen(?:d|sion)\b",
            r"\brefunds?\b", r"\bexpenses?\b[^.;]{0,40}\breimburs", r"\baudit\b",
            # what follows non-payment ("If you fail to pay ..., the account will be frozen") is not the duty
            r"\b(?:fails?|failure)\s+to\s+(?:make\s+)?pay|\bnon-?payment\b",
            # a side's statement of what it understands ("We understand how important it is to pay the invoices
            # you send promptly") is background to the duty, not the duty
            r"^(?:we|you|the\s+parties|each\s+party)\s+(?:\w+\s+)?(?:understands?|recogni[sz]es?|appreciates?|know)\s+"
            r"(?:how|that|why)\b",
            # cash paid instead of a fractional share on a conversion is a mechanic of the conversion, not the duty
            r"\bin\s+lieu\s+of\s+(?:any\s+|issuing\s+|the\s+)?fractional\b",
            COST_OF_REPAIR,  # "agrees to pay all charges associated with each such replacement": costs borne
            CARRIAGE_COSTS,  # "agrees to pay freight, insurance and any related expenses": carriage costs borne
            OWN_COSTS,  # "each party will pay the costs it incurs": each side bears its own
        ),
        # the interest a loan bears on its principal is part of what is owed ("promises to pay the principal with
        # interest on the unpaid principal at 6% per annum"), not interest on late payments
        not_related=_rx(r"\binterest\s+(?:on|upon)\s+(?:the\s+|all\s+|any\s+)?(?:outstanding|unpaid)\s+principal\b"),
    ),
    OperativeLexicon(
        "termination",
        core=_rx(
            r"\bmay\b[^.;:]{0,40}\bterminate\b",
            r"\b(?:will|shall)\s+(?:\w+\s+){0,2}terminate\s+(?:automatically|immediately|if|upon|on|in\s+the\s+event)\b",
            r"\bterminates?\s+automatically\b",
            r"\bright\s+to\s+(?:\w+\s+(?:or|and/or)\s+)?terminate\b",  # "the right to suspend or terminate"
            r"\bterminat\w*\b[^.;]{0,120}\b(?:material(?:ly)?\s+breach|breach(?:es)?\s+(?:of\s+)?(?:this|the|any)|"
            r"fails?\s+to\s+comply|insolven|bankrupt|liquidation|judicial\s+management|winding[\s-]up|receivership|"
            r"compromise\s+with\s+(?:its\s+)?creditors|for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|"
            r"without\s+cause)",
            MAY_END,  # "either you or the company may end the agreement at any time"
            # a side's right to end the agreement itself counts twice, above an ending that follows from another
            # contract's ("if the Head Contract is terminated for any reason, this Agreement terminates")
            PARTY_MAY_TERMINATE,
        ),
        related=_rx(
            r"\b(?:upon|on|after|following)\s+(?:the\s+|any\s+)?(?:expiration|expiry|termination)\b",
            r"\bin\s+the\s+event\s+of\s+(?:any\s+)?(?:expiration\s+or\s+)?termination\b",
            r"\b(?:effects?|consequences)\s+of\s+(?:expiration|expiry|termination)\b",
            r"\bsurviv", r"\breinstat", r"\b(?:does|will|shall)\s+not\s+(?:terminate|affect)\b",
            r"\b(?:return|destroy)\b[^.;]{0,60}\b(?:copies|confidential|materials|software|data)\b",
        ),
    ),
    OperativeLexicon(
        "governing_law",
        core=_rx(
            r"\bgoverned\s+(?:\w+\s+){0,3}by\b[^.;]{0,80}\blaws?\b",
            r"\b(?:construed|interpreted|enforced)\b[^.;]{0,60}\b(?:in\s+accordance\s+with|under|by)\b[^.;]{0,40}"
            r"\blaws?\b",
            r"\blaws?\s+of\b[^.;]{0,120}\b(?:govern|appl(?:y|ies)|will\s+apply|shall\s+apply)\b",
            r"\bgoverning\s+law\b[^.;]{0,60}\b(?:govern|is|will|shall)\b",
        ),
        related=_rx(r"\bcourts?\b", r"\bvenue\b", r"\bjurisdiction\b", r"\barbitrat", r"\btribunal"),
        related_unless_core=True,
    ),
    OperativeLexicon(
        "confidentiality",
        core=_rx(
            r"\b(?:will|shall|must|agrees?\s+to|may)\s+not\s+(?:\w+\s+){0,3}(?:use|disclose)\b",
            r"\b(?:not|never|nor)\s+(?:to\s+)?(?:use\s+or\s+)?(?:disclose|divulge)\b",
            r"\bneither\s+party\s+(?:will|shall|may)\s+(?:\w+\s+){0,2}(?:use|disclose)\b",
            r"\b(?:only|solely)\s+(?:use|to\s+use)\b|\buse\b[^.;]{0,80}\b(?:only|solely)\s+(?:for|to|in\s+connection)\b",
            # "hold in the strictest confidence", "will not (i) use ... or (ii) disclose": enumerated duties
            r"\b(?:hold|keep|treat|regards?)\b[^.;]{0,60}\b(?:in\s+(?:the\s+)?(?:strict(?:est)?\s+|trust\s+and\s+)?"
            r"confidence|as\s+(?:strictly\s+)?confidential|secret)\b",
            r"\b(?:will|shall|must|agrees?\s+to)\s+not\s+\(\w{1,4}\)\s+(?:use|disclose)\b",
            PASSIVE_NONDISCLOSURE,  # "Confidential Information shall not be disclosed ..."
            NOR_DISCLOSE,  # "...; nor shall a party or its employees disclose any such Proprietary Information"
            LIST_NOT_DISCLOSE,  # "You will neither ...: (a) use ...; or (b) disclose ..."
        ),
        related=_rx(
            # a supplement to a duty stated before it ("In addition, ...", "Without limiting the foregoing, ...")
            r"^(?:in\s+addition|additionally|furthermore|moreover|also|without\s+limiting\s+the\s+foregoing)\b",
            r"\b(?:standard|degree)\s+of\s+care\b|\breasonable\s+(?:efforts|care|measures|steps|precautions)\b",
            r"\b(?:does|do|shall|will)\s+not\s+(?:apply|include)\b|\bexclud",
            # the exclusions stated as who is not bound: "Neither party shall be bound by this Section with respect
            # to information it can document has entered the public domain"
            r"\bnot\s+be\s+bound\s+by\s+this\s+(?:section|clause|article|paragraph|agreement)\b|"
            r"\bneither\s+party\s+(?:shall|will)\s+be\s+bound\b",
            r"\bmay\s+disclose\b|\brequired\s+by\s+(?:law|applicable\s+laws?)\b|\bsubpoena\b",
            r"\b(?:return|destroy)\b", r"\b(?:equitable|injunctive)\s+relief\b|\birreparable\b",
            r"\bretains?\s+all\s+rights\b",
        ),
    ),
    OperativeLexicon(
        "indemnity",
        core=_rx(r"\b(?:will|shall|must|agrees?\s+to|hereby\s+agrees?\s+to)\s+(?:\w+\s+){0,2}(?:defend|indemnify)\b",
                 r"\bindemnify\b[^.;]{0,80}\b(?:against|from)\b"),
        related=_rx(r"\bpromptly\s+notify\b", r"\b(?:sole\s+)?control\s+(?:of\s+)?the\s+defen[cs]e\b",
                    r"\bcooperat", r"\bat\s+its\s+own\s+expense\b|\bown\s+counsel\b"),
    ),
    OperativeLexicon(
        "assignment",
        # "may not sell, assign or delegate any rights": the verbs of a restriction may come as a list
        # with commas, and then it names what is assigned (a list such as "will not ship, transfer or
        # export the SDK" restricts goods, not the agreement); "are not assignable": the restriction
        # stated as a quality of the rights
        core=_rx(rf"\b{NOT_MODAL}\s+(?:\w+\s+){{0,3}}(?:assign|transfer)\b",
                 # a restriction that names the agreement as what may not be assigned ("You may not assign your
                 # agreement with the company") before one about a permission under it ("You can't transfer your
                 # permission to anyone else")
                 rf"\b{NOT_MODAL}\s+(?:\w+\s+){{0,3}}(?:assign|transfer)\s+(?:this|the|your|its|their|our)\s+"
                 r"(?:agreement|contract|licen[cs]e|terms|mnda)\b",
                 r"\b(?:may|shall|will|must|can)\s*not\s+(?:\w+,\s+){1,3}(?:\w+\s+)?(?:assign|transfer)\b"
                 r"[^.;]{0,60}\b(?:agreement|rights?|obligations?|licen[cs]es?)\b",
                 r"\bnot\s+(?:be\s+)?(?:assignable|transferable)\b",
                 rf"\bassign\w*\b[^.;]{{0,160}}\bwithout\b[^.;]{{0,60}}\b{CONSENT}\b",
                 ASSIGN_CONDITION,  # "as a condition of the assignment, the assignee must agree in writing ..."
                 MAY_BE_TRANSFERRED_ONLY,  # "This Note may be transferred only upon its surrender to the Issuer"
                 NEITHER_MAY_ASSIGN,  # "Neither A nor B shall have the right ... to assign"
                 # the consent before the verb: "will not, without the prior written consent of X, assign"
                 r"\b(?:may|shall|will|must|can)\s*not\s*,?\s+(?:without|except\s+with)\b[^.;]{0,120}\bconsent\b"
                 r"[^.;]{0,80}?,\s*(?:\w+\s+){0,2}(?:assign|transfer)\b",
                 # a permission with its condition is the restriction too: "may transfer ... only if the
                 # other party agrees", "may assign ... provided that ...", "subject to the prior consent"
                 r"\bmay\s+(?:\w+\s+){0,3}(?:assign|transfer)\b[^.;]{0,160}\b(?:only\s+(?:if|with|upon|after)|"
                 r"provided\s+that|subject\s+to|with\s+(?:the\s+)?(?:prior\s+)?(?:written\s+)?consent)\b"),
        related=_rx(r"\binure\s+to\s+the\s+benefit\b|\bbinding\s+(?:up)?on\b", r"\b(?:null\s+and\s+)?void\b"),
        related_unless_core=True,  # "may not assign without consent; any other assignment is void" is the restriction
    ),
]}


# A sentence that defines a term ('"Change of Control" means ...', 'For purposes of this Note, a "Sale" means ...')
# is never the operative sentence of a kind but parties, whose sides may be named only by their definitions
# (docs/REVIEW.md): it carries the kind's words without stating its rule.
DEFINITION = re.compile(r"^(?:for\s+(?:the\s+)?purposes\s+of\s+[^,.;]{1,80},\s*)?(?:an?\s+|the\s+|each\s+)?[*_]*"
                        r"[\"\u201c][^\"\u201d]{1,60}[\"\u201d][*_]*\s*(?:\([^)]{0,40}\)\s*)?(?:shall\s+|will\s+)?"
                        r"(?:means?|refers?\s+to|has\s+the\s+meaning|shall\s+have\s+the\s+meaning)\b", re.I)


def operative_adjustment(kind: str, sentence: str) -> tuple[float, list[str]]:
    """(ranking adjustment, why) of one normalised sentence for ``kind``: core language up,
    a related provision's language down, a definition down (every kind but parties); 0 for
    kinds without such a lexicon that the sentence does not define."""
    if kind != "parties" and DEFINITION.search(sentence):
        return -RELATED_PENALTY, ["-definition"]
    lex = OPERATIVE.get(kind)
    if lex is None:
        return 0.0, []
    core = [p.pattern for p in lex.core if p.search(sentence)]
    related = [p.pattern for p in lex.related if p.search(sentence)]
    if related and any(p.search(sentence) for p in lex.not_related):
        related = []
    delta = min(CORE_BONUS * len(core), MAX_CORE)
    why = [f"+core {p}" for p in core]
    if related and not (core and lex.related_unless_core):
        delta -= RELATED_PENALTY
        why.append(f"-related {related[0]}")
    return delta, why
