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
  Read from what is excepted, not from the whole sentence ("nothing limits the liability of
  either party for:" with the list items that follow it).
* ``no_liability_cap`` (document): no limitation-of-liability clause found: medium.
* ``one_sided_indemnity`` (indemnity): only one side indemnifies: high when it is the
  customer/licensee/sponsor side (or indemnifies "us", or is the first-person signer: "I
  agree to indemnify"), medium otherwise; low when owed only for warranty or support the
  indemnifier chooses to offer.
* ``termination_for_convenience`` (termination): a party may terminate for convenience,
  for any reason, without cause or at any time (a right, not termination as an event or a
  ground inside a cause, nor "at any time if it determines ..."): high with notice under 30
  days or none stated, medium under 60 days or with pay in lieu of notice, low otherwise.
* ``automatic_renewal`` (term): the term renews automatically; the non-renewal notice
  window is read (in the sentence, or a notice to terminate in the next one of its paragraph):
  high with a window of 60 days or more or none stated, else medium.
* ``short_payment_term`` (payment): payment due within fewer than 30 days: medium.
* ``late_payment_interest`` (payment): interest on late payments: high from 18% a year
  (1.5% a month), medium otherwise or when the rate is stated elsewhere.
* ``assignment_change_of_control`` (assignment): one side may assign on a change of
  control, merger, sale of its business or to a successor without the other's consent:
  high.
The liability and indemnity rules are in :mod:`.risk_liability`, the governing-law rule in :mod:`.risk_law`;
this module holds the others and the registry (``RULES``).

* ``governing_law_venue`` (governing_law; the rule is in risk_law.py): the governing law and the venue; medium when
  the courts sit in another jurisdiction than the law's, low otherwise (for the record); low
  when either is a standard form's variable ("the State of Governing Law", "courts in
  Jurisdiction"), which names no place to compare.
"""

from __future__ import annotations

import re

from agentctx.agents.risk_hit import RuleHit, sentences
from agentctx.agents.risk_law import governing_law
from agentctx.agents.risk_liability import indemnity, liability, no_liability_cap

__all__ = ["RuleHit", "RULES", "RULE_KINDS", "evaluate_rules", "no_liability_cap", "notice_days"]

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


# ---------------------------------------------------------------- termination
# "for non-cause" and "for no cause" are "without cause" ("Either Party may terminate this agreement for
# non-cause with a sixty (60) written notice").
_NO_CAUSE = r"without\s+cause|for\s+(?:non-?|no\s+)cause"
_CONVENIENCE = re.compile(r"\bterminat\w*\b[^.;]{0,100}\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|"
                          rf"{_NO_CAUSE}|at\s+any\s+time|at\s+will)\b|"
                          rf"\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|{_NO_CAUSE})\b[^.;]{{0,60}}"
                          r"\bterminat", re.I)


_GROUND = re.compile(rf"\b(?:for\s+convenience|for\s+any\s+(?:or\s+no\s+)?reason|{_NO_CAUSE}|at\s+will)\b", re.I)
_NOTICE_NEAR = re.compile(r"\bnotice\b", re.I)
# A right to terminate, not termination as an event: "may (be) terminate(d)", "has the right to ...
# terminate", "at its discretion", "upon notice from" the terminating side. "Upon termination for any
# reason", "survive the termination ... for any reason", "If the licence is terminated for any reason"
# carry the words of a convenience ground and grant none.
_POWER = re.compile(r"\b(?:may|can|right\s+to|entitled\s+to|option\s+to|discretion)\b|"
                    r"\bupon\s+(?:\w+\s+)?notice\s+(?:from|by)\b", re.I)
# A ground inside a condition of the termination ("may terminate ... if You are at any time guilty of ...")
# is part of a cause, not a right without one.
_CONDITION = re.compile(r"\bif\b|\bwhere\b|\bin\s+the\s+event\b|\bshould\b|\bin\s+case\b", re.I)
# A period of notice: days that the sentence ties to notice ("30 days' notice", "effective 30 days after
# providing written notice", "notice of 30 days"), not days of another duty ("paid within 30 days of
# such termination").
_NOTICE_DAYS = re.compile(r"\b(?:\w+(?:-\w+)?\s+)?\(?\d{0,3}\)?\s*(?:business\s+|calendar\s+)?days?\b"
                          r"(?=[^.;]{0,60}\bnotice\b)|\bnotice\b[^.;]{0,20}?\bof\s+(?:\w+(?:-\w+)?\s+)?\(?\d{0,3}\)?"
                          r"\s*days?\b", re.I)
# A period of notice written without its unit, a number in words and figures right before "notice" ("with a
# sixty (60) written notice"): read as days, the unit notice periods are given in.
_BARE_NOTICE = re.compile(r"\b[a-z]+(?:-[a-z]+)?\s+\((?P<num>\d{1,3})\)\s+(?:days['\u2019]?\s+)?(?:prior\s+)?"
                          r"(?:written\s+)?notice\b", re.I)
_FOR_CAUSE = re.compile(r"\bbreach|\bcure\b|\binsolv|\bbankrupt", re.I)
_IN_LIEU = re.compile(r"\bin\s+lieu\s+of\b[^.;]{0,60}\bnotice\b", re.I)


# A right to end the agreement on notice alone, no ground named: "either Party may terminate this Agreement upon
# sixty (60) days' prior written notice", "either party may end this agreement on six months' notice".
_ON_NOTICE = re.compile(r"\b(?:may|can|(?:is|are)\s+entitled\s+to|(?:has|have)\s+the\s+right\s+to)\s+(?:\w+\s+){0,2}"
                        r"(?:terminate|end|cancel)\s+(?:this|the)\s+(?:agreement|contract|licen[cs]e)\b,?\s*"
                        r"(?:at\s+any\s+time\s+)?,?\s*(?:upon|on|by\s+giving|with|after)\s+(?:at\s+least\s+)?"
                        r"(?:[a-z]+(?:-[a-z]+)?\s+)?\(?\d{0,3}\)?\s*(?:business\s+|calendar\s+)?(?:days?|weeks?|months?)"
                        r"['\u2019]?\s+(?:prior\s+|advance\s+)?(?:written\s+)?notice\b(?P<rest>[^.;]*)", re.I)


def _on_notice_alone(sent: str) -> bool:
    """A right to end the agreement on a period of notice, with no condition or cause in the sentence."""
    m = _ON_NOTICE.search(sent)
    return bool(m and not _CONDITION.search(sent) and not _FOR_CAUSE.search(sent))


def _convenience(sent: str, lead: str | None) -> bool:
    """A right to terminate without cause in this sentence (or in this item under ``lead``)."""
    m = _CONVENIENCE.search(sent)
    if not m and _on_notice_alone(sent):
        return True
    if not m:
        return bool(_GROUND.search(sent) and lead is not None and re.search(r"\bterminat", lead, re.I)
                    and _POWER.search(lead))
    verb = re.search(r"\bterminat\w*", m.group(0), re.I)
    at = m.start() + verb.start()
    ground = re.search(rf"for\s+convenience|for\s+any|{_NO_CAUSE}|at\s+any\s+time|at\s+will", m.group(0), re.I)
    if at < m.start() + ground.start() and _CONDITION.search(sent[at:m.start() + ground.start()]):
        return False
    if ground.group(0).lower().startswith("at any time") and not _GROUND.search(sent):
        # "may terminate ... at any time if it reasonably determines that ...": a right on a ground,
        # whenever the ground arises, not one without cause ("at any time if it gives notice" still is).
        cond = re.match(r"\s*,?\s*(?:if|where|in\s+the\s+event|should|in\s+case|when)\b[^.;]*", sent[m.end():], re.I)
        if cond and not re.search(r"\bnotice\b", cond.group(0), re.I):
            return False
    if _FOR_CAUSE.search(sent[:at]) and _CONDITION.search(sent[:at]):
        return False  # "If either party materially breaches ..., the other may terminate ... at any time"
    word = verb.group(0).lower()
    if word.startswith("termination") or (word == "terminated" and not re.search(
            r"\b(?:may|can)\s+(?:\w+\s+)?be\s*$", sent[:at], re.I)):
        return False  # termination as an event: its effect, survival, a condition
    return bool(_POWER.search(sent) or (lead is not None and _POWER.search(lead)))


_MONTHS_NOTICE = re.compile(r"\b(?:(?P<word>[a-z]+)\s+)?(?:\((?P<num>\d{1,2})\)\s+|(?P<fig>\d{1,2})\s+)?"
                            r"(?:calendar\s+)?months?['\u2019]?\s+(?:prior\s+|advance\s+)?(?:written\s+)?notice\b",
                            re.I)


def _notice_months_days(sentence: str) -> int | None:
    """A notice period given in months, as days (30 a month); None when there is none."""
    m = _MONTHS_NOTICE.search(sentence)
    if not m:
        return None
    n = m["num"] or m["fig"] or _NUMBER_WORDS.get((m["word"] or "").lower())
    return 30 * int(n) if n else None


def _notice_days(sentence: str) -> int | None:
    m = _NOTICE_DAYS.search(sentence)
    if m:
        return notice_days(m.group(0))
    bare = _BARE_NOTICE.search(sentence)
    return int(bare["num"]) if bare else None


def _termination(text: str, spans) -> list[RuleHit]:
    """A right to terminate for convenience: in one sentence, or as an item ("c. for any or no reason
    ...") under a lead-in that grants it ("Either party may terminate this Agreement:"). The notice
    period is read where the sentence ties days to notice, else from the next sentences of the same
    paragraph that terminate on notice without a cause ("To terminate, the party must give 30 days'
    notice"; not "... if the other party fails to cure a breach within 30 days after notice")."""
    hits = []
    sents = sentences(text, spans)
    for i, (s, e, sent) in enumerate(sents):
        lead = next((p for _, _, p in reversed(sents[max(0, i - 4):i]) if p.rstrip().endswith(":")), None)
        if not _convenience(sent, lead):
            continue
        days = _notice_days(sent)
        if days is None:
            days = _notice_months_days(sent)  # "on six (6) months' notice", "on six months' notice"
        prev_end = e
        for ns, ne, nxt in sents[i + 1:i + 3]:
            if days is not None or re.search(r"\n\s*\n", text[prev_end:ns]) or _FOR_CAUSE.search(nxt):
                break
            if _NOTICE_NEAR.search(nxt) and re.search(r"\bterminat", nxt, re.I):
                days = _notice_days(nxt)
            prev_end = ne
        immediate = re.search(r"\bimmediately\b|\bwithout\s+notice\b", sent, re.I)
        if days is None and _IN_LIEU.search(sent):
            sev, notice = "medium", "with pay in lieu of notice"
        elif days is None:
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
# A renewal need not say "automatically": "Each Subscription Term will renew for successive periods unless ...".
_RENEWAL = re.compile(r"\brenew(?:s|ed)?\s+automatically\b|\bautomatic(?:ally)?\s+renew|\bauto-?renew|"
                      r"\bshall\s+be\s+(?:automatically\s+)?renewed\b|\bevergreen\b|"
                      r"\b(?:shall|will)\s+renew\s+for\s+(?:successive|additional|further|subsequent)\b", re.I)
# A non-renewal notice that may be given at any time before the term ends: "unless either party gives notice of its
# intention not to renew prior to the expiration of the current Subscription Term".
_ANY_TIME_BEFORE_END = re.compile(r"\b(?:not\s+to\s+renew|non-?renewal)\b[^.;]{0,40}\b(?:prior\s+to|before)\s+"
                                  r"(?:the\s+)?(?:expiration|expiry|end)\b", re.I)
# A non-renewal window set elsewhere: "before the Non-Renewal Notice Date", "within the Notice Period".
_WINDOW_REF = re.compile(r"\b(?:[A-Z][\w-]*\s+){0,3}Notice\s+(?:Date|Period|Deadline|Window)\b|"
                         r"\b(?:as|the\s+period)\s+(?:set\s+out|specified|stated)\s+in\s+(?:the\s+)?[A-Z][\w ]{2,40}")
_PERIOD = re.compile(r"\bperiods?\s+of\s+(\w+(?:\s+\(\d+\))?\s+(?:months?|years?))|"
                     r"\bsuccessive\s+(\w+(?:\s+\(\d+\))?[\s-]+(?:months?|years?))\s+(?:periods|terms)\b", re.I)


# A notice period in days or months, in a sentence after the renewal that ends or stops the agreement on notice
# ("This agreement will be automatically renewed ... A six (6) months notice must be given by either party of their
# intention to terminate ..."): the window to stop a renewal, stated apart.
_NOTICE_PERIOD = re.compile(r"\b(?P<phrase>(?:[a-z]+(?:-[a-z]+)?\s+)?\(?(?P<num>\d{1,3})\)?\s*"
                            r"(?:business\s+|calendar\s+)?(?P<unit>days?|months?))['\u2019]?\s+(?:prior\s+)?"
                            r"(?:written\s+)?notice\b", re.I)


def _window_after(text: str, end: int, following) -> tuple[int, str] | None:
    """(days, the period as written) of a notice to terminate or not renew in the sentence after a renewal, when it
    is in the same paragraph."""
    for ns, _, nxt in following[:1]:
        if re.search(r"\n\s*\n", text[end:ns]) or not re.search(r"\bterminat|\brenew", nxt, re.I):
            return None
        m = _NOTICE_PERIOD.search(nxt)
        if m:
            n = int(m["num"])
            return (n * 30 if m["unit"].lower().startswith("month") else n), m["phrase"]
    return None


# A renewal that points to the termination clause for how it stops: "shall automatically renew ... unless
# terminated as described below", "unless terminated in accordance with Section 5.2".
_UNLESS_TERMINATED_AS = re.compile(r"\bunless\s+(?:sooner\s+|earlier\s+)?terminated\s+(?:as\s+(?:described|provided|"
                                   r"set\s+(?:out|forth))|in\s+accordance\s+with|pursuant\s+to|under)\b", re.I)


def _window_below(sent: str, following) -> int | None:
    """Days of notice of the first right to terminate without cause in the sentences after a renewal that
    points to its termination clause ("unless terminated as described below"); None when there is none."""
    if not _UNLESS_TERMINATED_AS.search(sent):
        return None
    for _, _, nxt in following:
        if _convenience(nxt, None):
            return _notice_days(nxt) or _notice_months_days(nxt)
    return None


def _term(text: str, spans) -> list[RuleHit]:
    hits = []
    sents = sentences(text, spans)
    for i, (s, e, sent) in enumerate(sents):
        if not _RENEWAL.search(sent):
            continue
        window = None
        m = re.search(r"(?:\bunless\b|\bnotice\s+of\s+non-?renewal\b|\bnon-?renewal\b)", sent, re.I)
        if m:
            window = notice_days(sent)
        elif re.search(r"\b(?:prior\s+to|before)\b[^.;]{0,40}\b(?:renewal|expir|end\s+of)", sent, re.I):
            window = _notice_days(sent)  # "may terminate upon 90 days' notice prior to a renewal year"
        period = _PERIOD.search(sent)
        length = (period.group(1) or period.group(2)) if period else None
        per = f" for successive periods of {length}" if length else ""
        ref = _WINDOW_REF.search(sent)
        after = _window_after(text, e, sents[i + 1:]) if window is None and not ref else None
        below = _window_below(sent, sents[i + 1:i + 7]) if window is None and not ref and not after else None
        if after:
            window = after[0]
            sev = "high" if window >= 60 else "medium"
            how = f"it stops only with {after[1]}' notice to terminate (the next sentence)"
        elif below is not None:
            window = below
            sev = "high" if window >= 60 else "medium"
            how = f"it stops only with {window} days' notice to terminate (the termination right it points to)"
        elif window is None and ref:
            sev, how = "medium", f"the notice window to stop it is set by reference ({ref.group(0)}): check it"
        elif window is None and _ANY_TIME_BEFORE_END.search(sent):
            window, sev, how = 0, "medium", "a notice of non-renewal given any time before the term ends stops it"
        elif window is None:
            sev, how = "high", "no notice window to stop it is stated"
        else:
            sev = "high" if window >= 60 else "medium"
            how = f"it stops only with {window} days' notice before a renewal"
        hits.append(RuleHit("automatic_renewal", "term", sev, s, e,
                            f"The term renews automatically{per}; {how}.",
                            "Diarise the non-renewal deadline, or ask for renewal only by written agreement.",
                            {"notice_days": window, "period": length}))
    return hits


# ---------------------------------------------------------------- payment
_DUE = re.compile(r"\b(?:payable|due|paid|pay)\b[^.;]{0,60}\bwithin\b", re.I)
# "Any unpaid Fees are subject to a finance charge of one percent (1.0%) per month": a finance or late charge on
# unpaid sums is interest by another name.
_LATE = re.compile(r"\blate\s+payments?\b[^.;]{0,80}\binterest\b|\binterest\b[^.;]{0,60}\b(?:late|overdue|unpaid)\b|"
                   r"\b(?:late|overdue|unpaid)\b[^.;]{0,60}\b(?:finance|late|service)\s+charges?\b", re.I)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent|per\s+cent)\)?\s*(?:per\s+(annum|year|month)|a\s+(year|month))?",
                   re.I)


_OVER_BASE = re.compile(r"\s*(?:a\s+year\s+|per\s+annum\s+)?(?:over|above)\s+(?:the\s+)?[^.;]{0,40}?\b"
                        r"(?:base|reference|prime|policy|statutory)\s+(?:lending\s+)?rate\b", re.I)


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
            base = rate and _OVER_BASE.match(sent, rate.end())
            if base:  # "8% over Bank of England base rate": the rate moves with the base rate
                value = float(rate.group(1))
                sev, what, yearly = ("high" if value >= 18 else "medium"), \
                    f"at {rate.group(0).strip()} {base.group(0).strip()}", None
            elif rate:
                value = float(rate.group(1))
                per = (rate.group(2) or rate.group(3) or "year").lower()
                yearly = value * 12 if per == "month" else value
                sev = "high" if yearly >= 18 else "medium"
                what = f"at {rate.group(0).replace(')', '').strip()}"  # "one percent (1.0%) per month"
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


# The free assignment set as the exception to a consent requirement: "... not assignable ... without the other
# party's prior written consent ...; provided that either party may transfer and/or assign this Agreement to a
# successor in the event of a sale of all, or substantially all, of its business".
_FREE_PROVISO = re.compile(r"\b(?:provided\s+(?:that|however)|except\s+that|however)\b,?[^.;]{0,40}?\bmay\s+"
                           r"(?:freely\s+)?(?:assign|transfer)\b", re.I)


def _assignment(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
        free = _NO_CONSENT.search(sent) or _FREE_PROVISO.search(sent)
        if _COC.search(sent) and _ASSIGN_FREE.search(sent) and free \
                and not re.search(r"\b(?:may|shall|will)\s+not\s+assign\b", sent, re.I):
            hits.append(RuleHit("assignment_change_of_control", "assignment", "high", s, e,
                                "A party may assign the agreement on a change of control, merger, sale of its "
                                "business or to a successor without the other party's consent.",
                                "Require consent (not to be unreasonably withheld) for an assignment to a "
                                "successor or on a change of control, or a right to terminate if it happens."))
    return hits


RULES = {
    "liability_cap": liability,
    "indemnity": indemnity,
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
