"""Red-flag rules: well-known contract risks found by explicit patterns, each with its evidence.

The review's severities come from these rules, not from the small model (which rates
everything "high"; BENCHMARKS.md §4f). A rule reads the sentences of the sections that
carry one clause kind and returns a :class:`RuleHit`: rule name, severity, the evidence
sentence (a source span), a rationale that states what was found, and a recommendation
that says what to do about it. Every text is written whole here; nothing is cut.

Rules (name: kind, what fires it, severity):

* ``liability_uncapped`` (liability_cap): "unlimited liability", "without limitation of
  liability": high.
* ``liability_carve_out`` (liability_cap): the cap "does not apply to", "except for" ...
  indemnities, confidentiality, IP infringement, data: high; only death, personal injury,
  fraud, gross negligence or wilful misconduct (carve-outs the law usually requires): low.
* ``no_liability_cap`` (document): no limitation-of-liability clause found: medium.
* ``one_sided_indemnity`` (indemnity): only one side indemnifies: high when it is the
  customer/licensee side, medium otherwise.
* ``termination_for_convenience`` (termination): a party may terminate for convenience,
  for any reason, without cause or at any time: high with notice under 30 days or none
  stated, medium under 60 days, low otherwise.
* ``automatic_renewal`` (term): the term renews automatically; the non-renewal notice
  window is read: high with a window of 60 days or more or none stated, else medium.
* ``short_payment_term`` (payment): payment due within fewer than 30 days: medium.
* ``late_payment_interest`` (payment): interest on late payments: high from 18% a year
  (1.5% a month), medium otherwise or when the rate is stated elsewhere.
* ``assignment_change_of_control`` (assignment): one side may assign on a change of
  control, merger, sale of its business or to a successor without the other's consent:
  high.
* ``governing_law_venue`` (governing_law; the rule is in risk_law.py): the governing law and the venue; medium when
  the courts sit in another jurisdiction than the law's, low otherwise (for the record); low
  when either is a standard form's variable ("the State of Governing Law", "courts in
  Jurisdiction"), which names no place to compare.
"""

from __future__ import annotations

import re

from agentctx.agents.risk_hit import RuleHit, sentences
from agentctx.agents.risk_law import governing_law

__all__ = ["RuleHit", "RULES", "RULE_KINDS", "evaluate_rules", "no_liability_cap", "notice_days"]

_CUSTOMER_SIDE = re.compile(r"\b(?:you|your|licensee|customer|client|recipient|partner|user|buyer|subscriber|"
                            r"distributor|commercial\s+distributor|redistributor)\b", re.I)
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split())}
_NUMBER_WORDS.update({"twenty": 20, "thirty": 30, "forty-five": 45, "forty": 40, "sixty": 60, "ninety": 90,
                      "fifty": 50, "seventy-five": 75, "one hundred twenty": 120, "hundred and twenty": 120})
_DAYS = re.compile(r"\b(?:(?P<word>[a-z]+(?:-[a-z]+)?)\s+)?\(?(?P<num>\d{1,3})?\)?\s*(?:business\s+|calendar\s+)?"
                   r"days?\b", re.I)


def notice_days(sentence: str) -> int | None:
    """The first period in days in a sentence: "twenty (20) days'" -> 20, "29 days" -> 29."""
    for m in _DAYS.finditer(sentence):
        if m["num"]:
            return int(m["num"])
        w = (m["word"] or "").lower()
        if w in _NUMBER_WORDS:
            return _NUMBER_WORDS[w]
    return None


# ---------------------------------------------------------------- liability
_UNLIMITED = re.compile(r"\bunlimited\s+liability\b|"
                        r"\bliability\b[^.;]{0,60}\b(?:is|shall\s+be|will\s+be)\s+unlimited\b|"
                        r"\bwithout\s+(?:any\s+)?limit(?:ation)?\s+(?:of|on|as\s+to)\s+(?:its\s+|their\s+)?liability\b",
                        re.I)
_CARVE = re.compile(r"\b(?:cap|limitations?|limits?|exclusions?)\b[^.;]{0,80}\b(?:does|do|shall|will)\s+not\s+apply\b|"
                    r"\b(?:except|excluding|other\s+than|save)\s+(?:for\s+|in\s+(?:the\s+)?cases?\s+of\s+)?"
                    r"[^.;]{0,120}\b(?:indemnit|confidential|infring|gross\s+negligence|wil(?:l)?ful|fraud|death|"
                    r"personal\s+injury|data)|"
                    r"\b(?:neither\s+party\s+|nothing\b[^.;]{0,60}\b)(?:excludes?|limits?)\b"
                    r"[^.;]{0,40}\bliability\s+for\b", re.I)
_BIG_EXPOSURE = re.compile(r"\bindemnit|\bconfidential|\binfring|\bdata\b|\bintellectual\s+property\b", re.I)


_WAIVER = re.compile(r"\b(?:indirect|consequential|incidental|special|punitive|exemplary)\b[^.;]{0,80}\bdamages\b|"
                     r"\blost\s+(?:profits?|revenues?|data|business)\b", re.I)
_CAP_AMOUNT = re.compile(r"\b(?:exceed|aggregate|total\s+(?:cumulative\s+)?liability|cap(?:ped)?\b|limited\s+to|"
                         r"greater\s+of|lesser\s+of)", re.I)
_USUAL = re.compile(r"\bdeath\b|\bpersonal\s+injury\b|\bfraud|\bgross\s+negligence\b|\bwil(?:l)?ful|"
                    r"\bcannot\s+be\s+(?:limited|excluded)\b|\bapplicable\s+law\b", re.I)
# The carved-out claims named by a defined term ("does not apply to any Unlimited Claims"): what they are is
# in the definition, so the rule names the term and asks the reader to check it.
_DEFINED_CARVE = re.compile(r"\bnot\s+apply\s+to\s+(?:any\s+|the\s+)?(?P<term>(?:[A-Z][\w-]*\s+){0,3}"
                            r"(?:Claims?|Liabilities|Obligations|Matters|Losses))\b")


def _carve_out(s: int, e: int, sent: str) -> RuleHit:
    """A sentence that excepts claims from a limitation: what is excepted, from what, how serious."""
    waiver_only = bool(_WAIVER.search(sent)) and not _CAP_AMOUNT.search(sent)
    big, defined = _BIG_EXPOSURE.search(sent), _DEFINED_CARVE.search(sent)
    if waiver_only:
        # The exception is to the exclusion of indirect damages, not to the cap: those claims may
        # recover indirect damages, still within whatever cap the contract sets.
        what = big.group(0).lower() if big else "the claims it names"
        return RuleHit("liability_carve_out", "liability_cap", "medium" if big else "low", s, e,
                       f"The exclusion of indirect damages does not apply to {what}...: those claims may recover "
                       "indirect damages; whether they are capped is for the cap clause to say.",
                       "Check that the cap clause covers these claims, or agree a separate cap for them.",
                       {"carve_out": what, "from": "damages waiver"})
    if defined:
        term = defined["term"].strip()
        return RuleHit("liability_carve_out", "liability_cap", "high", s, e,
                       f"The limitation of liability does not apply to {term}: those claims are uncapped; "
                       f"read the definition of {term} to see which they are.",
                       "Cap the carved-out claims too, or put a separate, higher cap on them.",
                       {"carve_out": term, "from": "cap"})
    if big:
        return RuleHit("liability_carve_out", "liability_cap", "high", s, e,
                       "The limitation of liability has a carve-out for large exposures "
                       f"({big.group(0).lower()}...): those claims are uncapped.",
                       "Cap the carved-out claims too, or put a separate, higher cap on them.",
                       {"carve_out": big.group(0).lower(), "from": "cap"})
    if _USUAL.search(sent):
        return RuleHit("liability_carve_out", "liability_cap", "low", s, e,
                       "The limitation of liability excepts death, personal injury, fraud or wilful "
                       "misconduct: the usual carve-outs that the law requires.",
                       "No change needed; check that the list is no wider than the law requires.",
                       {"from": "cap"})
    return RuleHit("liability_carve_out", "liability_cap", "medium", s, e,
                   "The limitation of liability does not apply to some claims: read which, as they are uncapped.",
                   "Cap the carved-out claims too, or put a separate, higher cap on them.", {"from": "cap"})


def _liability(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
        if _UNLIMITED.search(sent):
            hits.append(RuleHit("liability_uncapped", "liability_cap", "high", s, e,
                                "This sentence leaves liability unlimited.",
                                "Negotiate an overall cap on liability, for example the fees paid in the "
                                "twelve months before the claim."))
        elif (_CARVE.search(sent) or _DEFINED_CARVE.search(sent)) and re.search(r"\bliab|\bcap\b|\bdamages\b|"
                                                                             r"\blimitation", sent, re.I):
            hits.append(_carve_out(s, e, sent))
    return hits


def no_liability_cap(searched: str = "") -> RuleHit:
    """The document-level rule: no limitation-of-liability clause was found."""
    where = f" (searched: {searched})" if searched else ""
    return RuleHit("no_liability_cap", "liability_cap", "medium", None, None,
                   f"No limitation of liability was found{where}, so liability may be unlimited.",
                   "Add a limitation of liability with an overall cap and an exclusion of indirect damages.")


# ---------------------------------------------------------------- indemnity
_INDEMNIFIER = re.compile(
    r"(?P<who>\b(?:each|either)\s+party\b|\bthe\s+parties\b|\b(?:[A-Z][\w&.'\u2019-]*\s+){0,3}[A-Z][\w&.'\u2019-]*|\byou\b)"
    r"\s+(?:shall|will|must|agrees?\s+to|hereby\s+agrees?\s+to|undertakes?\s+to)\s+(?:\w+\s+){0,3}?"
    r"(?:indemnify|defend|hold\s+harmless)")


def _indemnity(text: str, spans) -> list[RuleHit]:
    who: dict[str, tuple[int, int]] = {}
    for s, e, sent in sentences(text, spans):
        for m in _INDEMNIFIER.finditer(sent):
            name = m["who"].strip()
            first = name.split()[0].lower()
            if first in ("the", "a", "any", "such") and "parties" not in name.lower():
                name = " ".join(name.split()[1:]) or name
            who.setdefault(name.lower(), (s, e))
    if not who:
        return []
    if any(re.search(r"\b(?:each|either)\s+party\b|\bthe\s+parties\b", w) for w in who) or len(who) >= 2:
        return []
    name, (s, e) = next(iter(who.items()))
    customer = bool(_CUSTOMER_SIDE.search(name))
    sev = "high" if customer else "medium"
    side = "your side (" + name + ")" if customer else name
    return [RuleHit("one_sided_indemnity", "indemnity", sev, s, e,
                    f"Only {side} gives an indemnity; the other side gives none.",
                    "Ask for a mutual indemnity, or limit this one to claims caused by the indemnifying side "
                    "and cap it.", {"indemnifier": name})]


# ---------------------------------------------------------------- termination
_CONVENIENCE = re.compile(r"\bterminat\w*\b[^.;]{0,100}\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|"
                          r"without\s+cause|at\s+any\s+time|at\s+will)\b|"
                          r"\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|without\s+cause)\b[^.;]{0,60}"
                          r"\bterminat", re.I)


_GROUND = re.compile(r"\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|without\s+cause|at\s+will)\b", re.I)
_NOTICE_NEAR = re.compile(r"\bnotice\b", re.I)


def _termination(text: str, spans) -> list[RuleHit]:
    """A termination for convenience: in one sentence, or as an item ("c. for any or no reason ...")
    under a lead-in that terminates ("Either party may terminate this Agreement:"). The notice
    period is read from the sentence, else from the next one of the clause ("To terminate, the
    party must give 30 days' notice")."""
    hits = []
    sents = sentences(text, spans)
    for i, (s, e, sent) in enumerate(sents):
        lead = next((p for _, _, p in reversed(sents[max(0, i - 4):i]) if p.rstrip().endswith(":")), None)
        own = _CONVENIENCE.search(sent)
        item = not own and _GROUND.search(sent) and lead is not None and re.search(r"\bterminat", lead, re.I)
        if not (own or item):
            continue
        days = notice_days(sent)
        if days is None and i + 1 < len(sents) and _NOTICE_NEAR.search(sents[i + 1][2]) \
                and re.search(r"\bterminat", sents[i + 1][2], re.I):
            days = notice_days(sents[i + 1][2])
        immediate = re.search(r"\bimmediately\b|\bwithout\s+notice\b", sent, re.I)
        if days is None:
            sev, notice = "high", ("with immediate effect" if immediate else "with no notice period stated")
        else:
            sev = "high" if days < 30 else "medium" if days < 60 else "low"
            notice = f"on {days} days' notice"
        hits.append(RuleHit("termination_for_convenience", "termination", sev, s, e,
                            f"A party may end the agreement without cause {notice}.",
                            "Ask for at least 60 days' notice and payment for work done and committed costs "
                            "on a termination for convenience.", {"notice_days": days}))
    return hits


# ---------------------------------------------------------------- term
_RENEWAL = re.compile(r"\brenew(?:s|ed)?\s+automatically\b|\bautomatic(?:ally)?\s+renew|\bauto-?renew|"
                      r"\bshall\s+be\s+(?:automatically\s+)?renewed\b|\bevergreen\b", re.I)
# A non-renewal window set elsewhere: "before the Non-Renewal Notice Date", "within the Notice Period".
_WINDOW_REF = re.compile(r"\b(?:[A-Z][\w-]*\s+){0,3}Notice\s+(?:Date|Period|Deadline|Window)\b|"
                         r"\b(?:as|the\s+period)\s+(?:set\s+out|specified|stated)\s+in\s+(?:the\s+)?[A-Z][\w ]{2,40}")
_PERIOD = re.compile(r"\bperiods?\s+of\s+(\w+(?:\s+\(\d+\))?\s+(?:months?|years?))", re.I)


def _term(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
        if not _RENEWAL.search(sent):
            continue
        window = None
        m = re.search(r"(?:\bunless\b|\bnotice\s+of\s+non-?renewal\b|\bnon-?renewal\b)", sent, re.I)
        if m:
            window = notice_days(sent)
        period = _PERIOD.search(sent)
        per = f" for successive periods of {period.group(1)}" if period else ""
        ref = _WINDOW_REF.search(sent)
        if window is None and ref:
            sev, how = "medium", f"the notice window to stop it is set by reference ({ref.group(0)}): check it"
        elif window is None:
            sev, how = "high", "no notice window to stop it is stated"
        else:
            sev = "high" if window >= 60 else "medium"
            how = f"it stops only with {window} days' notice of non-renewal"
        hits.append(RuleHit("automatic_renewal", "term", sev, s, e,
                            f"The term renews automatically{per}; {how}.",
                            "Diarise the non-renewal deadline, or ask for renewal only by written agreement.",
                            {"notice_days": window, "period": period.group(1) if period else None}))
    return hits


# ---------------------------------------------------------------- payment
_DUE = re.compile(r"\b(?:payable|due|paid|pay)\b[^.;]{0,60}\bwithin\b", re.I)
_LATE = re.compile(r"\blate\s+payments?\b[^.;]{0,80}\binterest\b|\binterest\b[^.;]{0,60}\b(?:late|overdue|unpaid)\b",
                   re.I)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent|per\s+cent)\s*(?:per\s+(annum|year|month)|a\s+(year|month))?",
                   re.I)


def _payment(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
        if _DUE.search(sent):
            days = notice_days(sent[_DUE.search(sent).start():])
            if days is not None and days < 30:
                hits.append(RuleHit("short_payment_term", "payment", "medium", s, e,
                                    f"Payment is due within {days} days, shorter than the usual 30.",
                                    "Ask for payment within 30 days of a correct invoice.", {"due_days": days}))
        if _LATE.search(sent):
            rate = _RATE.search(sent)
            if rate:
                value = float(rate.group(1))
                per = (rate.group(2) or rate.group(3) or "year").lower()
                yearly = value * 12 if per == "month" else value
                sev = "high" if yearly >= 18 else "medium"
                what = f"at {rate.group(0).strip()}"
            else:
                sev, what, yearly = "medium", "at a rate set elsewhere in the contract", None
            hits.append(RuleHit("late_payment_interest", "payment", sev, s, e,
                                f"Late payments accrue interest {what}.",
                                "Check the rate against the statutory rate and ask for a grace period and notice "
                                "before interest runs.", {"yearly_percent": yearly}))
    return hits


# ---------------------------------------------------------------- assignment
_COC = re.compile(r"\bchange\s+of\s+control\b|\bmerger\b|\bacquisition\b|\breorgani[sz]ation\b|"
                  r"\b(?:all\s+or\s+)?substantially\s+all\b|\bsuccessors?\s+(?:to|in\s+interest)\b|"
                  r"\bsale\s+of\s+(?:its|the|all)\b", re.I)
_ASSIGN_FREE = re.compile(r"\bmay\s+(?:freely\s+)?(?:assign|transfer)\b", re.I)
_NO_CONSENT = re.compile(r"\bwithout\s+(?:the\s+)?(?:[\w'\u2019]+\s+){0,3}consent\b|"
                         r"\b(?:on|upon)\s+(?:written\s+)?notice\b|"
                         r"\bfreely\b|\bwithout\s+(?:such\s+)?approval\b", re.I)


def _assignment(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
        if _COC.search(sent) and _ASSIGN_FREE.search(sent) and _NO_CONSENT.search(sent) \
                and not re.search(r"\b(?:may|shall|will)\s+not\s+assign\b", sent, re.I):
            hits.append(RuleHit("assignment_change_of_control", "assignment", "high", s, e,
                                "A party may assign the agreement on a change of control, merger, sale of its "
                                "business or to a successor without the other party's consent.",
                                "Require consent (not to be unreasonably withheld) for an assignment to a "
                                "successor or on a change of control, or a right to terminate if it happens."))
    return hits


RULES = {
    "liability_cap": _liability,
    "indemnity": _indemnity,
    "termination": _termination,
    "term": _term,
    "payment": _payment,
    "assignment": _assignment,
    "governing_law": governing_law,
}
RULE_KINDS = tuple(RULES)


def evaluate_rules(kind: str, text: str, spans: list[tuple[int, int]]) -> list[RuleHit]:
    """The rule hits for one clause kind over the given sentence spans (its sections' sentences)."""
    rule = RULES.get(kind)
    return rule(text, spans) if rule else []
