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

# The reader's side: the one that takes a licence, buys or pays for a service or programme ("Sponsor", the
# company that sponsors an event; not a "fiscal sponsor", the foundation that hosts a project).
_CUSTOMER_SIDE = re.compile(r"\b(?:you|your|licensee|customer|client|recipient|partner|user|buyer|subscriber|"
                            r"distributor|commercial\s+distributor|redistributor|(?<!fiscal\s)sponsor)\b", re.I)
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
# "the liability of either party for", "liability to the Customer for": whose liability, before what for.
_WHOSE = r"(?:\s+(?:of|to)\s+[^.;:]{1,40}?)?"
_CARVE = re.compile(r"\b(?:cap|limitations?|limits?|exclusions?)\b[^.;]{0,80}\b(?:does|do|shall|will)\s+not\s+apply\b|"
                    r"\b(?:except|excluding|other\s+than|save)\s+(?:for\s+|in\s+(?:the\s+)?cases?\s+of\s+)?"
                    r"[^.;]{0,120}\b(?:indemnit|confidential|infring|gross\s+negligence|wil(?:l)?ful|fraud|death|"
                    r"personal\s+injury|data)|"
                    r"\b(?:neither\s+party\s+|nothing\b[^.;]{0,60}\b)(?:excludes?|limits?)\b"
                    r"[^.;]{0,40}\bliability" + _WHOSE + r"\s+for\b", re.I)
_BIG_EXPOSURE = re.compile(r"\bindemnit|\bconfidential|\binfring|\bdata\b|\bintellectual\s+property\b", re.I)


_WAIVER = re.compile(r"\b(?:indirect|consequential|incidental|special|punitive|exemplary)\b[^.;]{0,80}\bdamages\b|"
                     r"\blost\s+(?:profits?|revenues?|data|business)\b", re.I)
_CAP_AMOUNT = re.compile(r"\b(?:exceed|aggregate|total\s+(?:cumulative\s+)?liability|cap(?:ped)?\b|limited\s+to|"
                         r"greater\s+of|lesser\s+of)", re.I)
# The carved-out claims named by a defined term ("does not apply to any Unlimited Claims"): what they are is
# in the definition, so the rule names the term and asks the reader to check it.
_DEFINED_CARVE = re.compile(r"\bnot\s+apply\s+to\s+(?:any\s+|the\s+)?(?P<term>(?:[A-Z][\w-]*\s+){0,3}"
                            r"(?:Claims?|Liabilities|Obligations|Matters|Losses))\b")


# What a carve-out excepts, read apart from the rest of the sentence: "Except in the cases of wilful
# misconduct ..., the Licensor will not be liable for ... loss of data" excepts wilful misconduct, not data.
_NOT_APPLY = re.compile(r"\b(?:does|do|shall|will)\s+not\s+apply\s+to\b", re.I)
_EXCEPT = re.compile(r"\b(?:except|excluding|other\s+than|save)\b", re.I)
_MAIN_CLAUSE = re.compile(r",\s*(?:the|each|either|neither|in\s+no|under\s+no|[A-Z])|;")
_USUAL_NAMES = (("death", r"\bdeath\b"), ("personal injury", r"\bpersonal\s+injury\b"),
                ("harm to natural persons", r"\bnatural\s+persons?\b"), ("fraud", r"\bfraud"),
                ("gross negligence", r"\bgross\s+negligence\b"), ("wilful misconduct", r"\bwil(?:l)?ful"),
                ("what the law does not allow to be limited", r"\bcannot\s+be\s+(?:limited|excluded)\b|"
                                                              r"\bapplicable\s+law\s+prohibits\b"))
_DEFINED_TERM = re.compile(r"\b(?:[A-Z][\w-]*\s+){1,3}(?:Claims?|Liabilities|Obligations|Matters|Losses)\b")


def _excepted(sent: str) -> str:
    m = _NOT_APPLY.search(sent)
    if m:
        return sent[m.end():]
    m = _EXCEPT.search(sent)
    if m:
        rest = sent[m.end():]
        cut = _MAIN_CLAUSE.search(rest)
        return rest[:cut.start()] if cut else rest
    m = re.search(r"\bliability" + _WHOSE + r"\s+for\b", sent, re.I)
    return sent[m.end():] if m else sent


def _carve_out(s: int, e: int, sent: str, after: str = "", items: str = "") -> RuleHit:
    """A sentence that excepts claims from a limitation: what is excepted, from what, how serious.
    ``after``: the sentences that follow it in the clause (where a class it names gets a cap of its own);
    ``items``: the list the sentence introduces ("... the liability of either party for:"), read as excepted."""
    waiver_only = bool(_WAIVER.search(sent + " " + items)) and not _CAP_AMOUNT.search(sent + " " + items)
    part = (_excepted(sent) + " " + items).strip()
    big = _BIG_EXPOSURE.search(part)
    terms = list(dict.fromkeys(t.strip() for t in _DEFINED_TERM.findall(part))) if _NOT_APPLY.search(sent) else []
    usual = [name for name, pat in _USUAL_NAMES if re.search(pat, part, re.I)]
    if waiver_only and big:
        # The exception is to the exclusion of indirect damages, not to the cap: those claims may
        # recover indirect damages, still within whatever cap the contract sets.
        what = big.group(0).lower()
        return RuleHit("liability_carve_out", "liability_cap", "medium", s, e,
                       f"The exclusion of indirect damages does not apply to {what}...: those claims may recover "
                       "indirect damages; whether they are capped is for the cap clause to say.",
                       "Check that the cap clause covers these claims, or agree a separate cap for them.",
                       {"carve_out": what, "from": "damages waiver"})
    if terms:
        # A class with a cap of its own ("For all Enhanced Claims, ... will not exceed the Enhanced Cap")
        # is outside the general cap, not uncapped.
        own = [t for t in terms if re.search(re.escape(t) + r"[^.;]{0,80}\b(?:will\s+not\s+exceed|shall\s+not\s+"
                                             r"exceed|limited\s+to|capped\s+at)", after)]
        rest = [t for t in terms if t not in own]
        said = [f"{' and '.join(own)} {'have' if len(own) > 1 or own[0].endswith('s') else 'has'} a cap of "
                "their own (read it)"] if own else []
        said += [f"{' and '.join(rest)} {'are' if len(rest) > 1 or rest[0].endswith('s') else 'is'} uncapped"] \
            if rest else []
        return RuleHit("liability_carve_out", "liability_cap", "high" if rest else "medium", s, e,
                       f"The limitation of liability does not apply to {' and '.join(terms)}: {'; '.join(said)}; "
                       f"read the definition{'s' if len(terms) > 1 else ''} to see which claims they are.",
                       "Cap the carved-out claims too, or put a separate, higher cap on them.",
                       {"carve_out": " and ".join(terms), "from": "cap"})
    if big:
        return RuleHit("liability_carve_out", "liability_cap", "high", s, e,
                       "The limitation of liability has a carve-out for large exposures "
                       f"({big.group(0).lower()}...): those claims are uncapped.",
                       "Cap the carved-out claims too, or put a separate, higher cap on them.",
                       {"carve_out": big.group(0).lower(), "from": "cap"})
    if usual:
        return RuleHit("liability_carve_out", "liability_cap", "low", s, e,
                       f"The limitation of liability excepts {', '.join(usual)}: carve-outs the law usually "
                       "requires.",
                       "No change needed; check that the list is no wider than the law requires.",
                       {"carve_out": ", ".join(usual), "from": "damages waiver" if waiver_only else "cap"})
    if waiver_only:
        return RuleHit("liability_carve_out", "liability_cap", "low", s, e,
                       "The exclusion of indirect damages does not apply to the claims it names: those claims "
                       "may recover indirect damages; whether they are capped is for the cap clause to say.",
                       "Check that the cap clause covers these claims, or agree a separate cap for them.",
                       {"carve_out": "the claims it names", "from": "damages waiver"})
    return RuleHit("liability_carve_out", "liability_cap", "medium", s, e,
                   "The limitation of liability does not apply to some claims: read which, as they are uncapped.",
                   "Cap the carved-out claims too, or put a separate, higher cap on them.", {"from": "cap"})


def _list_items(sent: str, following) -> list:
    """The items a lead-in ending in a colon introduces, when the sections give each its own sentence:
    the following sentences up to the first that does not end as an item that goes on (";", ", and",
    "; or")."""
    if not sent.rstrip().endswith(":"):
        return []
    items = []
    for item in following[:8]:
        items.append(item)
        if not re.search(r"(?:[;,:]|\b(?:and|or))\s*$", item[2].rstrip()):
            break
    return items


def _liability(text: str, spans) -> list[RuleHit]:
    hits = []
    sents = sentences(text, spans)
    for i, (s, e, sent) in enumerate(sents):
        if _UNLIMITED.search(sent):
            hits.append(RuleHit("liability_uncapped", "liability_cap", "high", s, e,
                                "This sentence leaves liability unlimited.",
                                "Negotiate an overall cap on liability, for example the fees paid in the "
                                "twelve months before the claim."))
        elif (_CARVE.search(sent) or _DEFINED_CARVE.search(sent)) and re.search(r"\bliab|\bcap\b|\bdamages\b|"
                                                                             r"\blimitation", sent, re.I):
            # "Nothing ... limits the liability of either party for:" with each claim an item of its own:
            # what is excepted is in the items, and the evidence runs to the last of them.
            items = _list_items(sent, sents[i + 1:])
            j = i + 1 + len(items)
            hits.append(_carve_out(s, items[-1][1] if items else e, sent,
                                   " ".join(x for _, _, x in sents[j:j + 2]), " ".join(x for _, _, x in items)))
    return hits


def no_liability_cap(searched: str = "") -> RuleHit:
    """The document-level rule: no limitation-of-liability clause was found."""
    where = f" (searched: {searched})" if searched else ""
    return RuleHit("no_liability_cap", "liability_cap", "medium", None, None,
                   f"No limitation of liability was found{where}, so liability may be unlimited.",
                   "Add a limitation of liability with an overall cap and an exclusion of indirect damages.")


# ---------------------------------------------------------------- indemnity
# The promise may carry an aside before its object ("agrees, at its own expense, to indemnify"): missing
# it would hide a second indemnifier and report the other side's indemnity as the only one.
_INDEMNIFIER = re.compile(
    r"(?P<who>\b(?:each|either)\s+party\b|\bthe\s+parties\b|\b(?:[A-Z][\w&.'\u2019-]*\s+){0,3}[A-Z][\w&.'\u2019-]*|\byou\b)"
    r"\s+(?:shall|will|must|(?:hereby\s+)?(?:agrees?|undertakes?)(?:,[^,.;]{1,40},)?\s+to)\s+(?:\w+\s+){0,3}?"
    r"(?:indemnify|defend|hold\s+harmless)")


# An indemnity owed only for terms the indemnifier chooses to offer ("only if You agree to indemnify ...
# by reason of your accepting any such warranty", "for warranty or support terms You offer"): the open
# source licences' condition on offering more than the licence does, not a standing duty.
_OPT_IN = re.compile(r"\b(?:warrant(?:y|ies)|support|liability)\b[^.;]{0,80}\b(?:you|licensee|it)\s+"
                     r"(?:offers?|provides?|assumes?)\b|"
                     r"\baccept(?:ing|s|ed)?\s+(?:any\s+)?(?:such\s+)?(?:warrant|obligation|additional\s+liabilit)",
                     re.I)
# "agrees to indemnify and save harmless Us": a site's or provider's terms written as "we"; the side
# that indemnifies "us" is the user's.
_INDEMNIFIES_US = re.compile(r"^[^.;,]{0,40}?\b(?:us|we)\b", re.I)


def _indemnity(text: str, spans) -> list[RuleHit]:
    who: dict[str, list[tuple[int, int, str, bool]]] = {}
    for s, e, sent in sentences(text, spans):
        for m in _INDEMNIFIER.finditer(sent):
            name = m["who"].strip()
            first = name.split()[0].lower()
            if first in ("the", "a", "any", "such") and "parties" not in name.lower():
                name = " ".join(name.split()[1:]) or name
            who.setdefault(name.lower(), []).append((s, e, sent, bool(_INDEMNIFIES_US.search(sent[m.end():]))))
    if not who:
        return []
    if any(re.search(r"\b(?:each|either)\s+party\b|\bthe\s+parties\b", w) for w in who) or len(who) >= 2:
        return []
    name, found = next(iter(who.items()))
    standing = [f for f in found if not _OPT_IN.search(f[2])]
    s, e, _, to_us = (standing or found)[0]
    # "I agree to indemnify ...": a form written in the first person of whoever signs it (a presenter's
    # or volunteer's release); the signer is the reader's own side.
    signer = name == "i"
    customer = bool(_CUSTOMER_SIDE.search(name)) or to_us or signer
    side = "your side (I, the signer)" if signer else "your side (" + name + ")" if customer else name
    if not standing:
        return [RuleHit("one_sided_indemnity", "indemnity", "low", s, e,
                        f"Only {side} gives an indemnity, and only for warranty, support or liability terms it "
                        "chooses to offer.",
                        "Offer no more than the licence does, or price and cap what you offer.",
                        {"indemnifier": name, "opt_in": True})]
    return [RuleHit("one_sided_indemnity", "indemnity", "high" if customer else "medium", s, e,
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
_FOR_CAUSE = re.compile(r"\bbreach|\bcure\b|\binsolv|\bbankrupt", re.I)
_IN_LIEU = re.compile(r"\bin\s+lieu\s+of\b[^.;]{0,60}\bnotice\b", re.I)


def _convenience(sent: str, lead: str | None) -> bool:
    """A right to terminate without cause in this sentence (or in this item under ``lead``)."""
    m = _CONVENIENCE.search(sent)
    if not m:
        return bool(_GROUND.search(sent) and lead is not None and re.search(r"\bterminat", lead, re.I)
                    and _POWER.search(lead))
    verb = re.search(r"\bterminat\w*", m.group(0), re.I)
    at = m.start() + verb.start()
    ground = re.search(r"for\s+convenience|for\s+any|without\s+cause|at\s+any\s+time|at\s+will", m.group(0), re.I)
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


def _notice_days(sentence: str) -> int | None:
    m = _NOTICE_DAYS.search(sentence)
    return notice_days(m.group(0)) if m else None


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
_RENEWAL = re.compile(r"\brenew(?:s|ed)?\s+automatically\b|\bautomatic(?:ally)?\s+renew|\bauto-?renew|"
                      r"\bshall\s+be\s+(?:automatically\s+)?renewed\b|\bevergreen\b", re.I)
# A non-renewal window set elsewhere: "before the Non-Renewal Notice Date", "within the Notice Period".
_WINDOW_REF = re.compile(r"\b(?:[A-Z][\w-]*\s+){0,3}Notice\s+(?:Date|Period|Deadline|Window)\b|"
                         r"\b(?:as|the\s+period)\s+(?:set\s+out|specified|stated)\s+in\s+(?:the\s+)?[A-Z][\w ]{2,40}")
_PERIOD = re.compile(r"\bperiods?\s+of\s+(\w+(?:\s+\(\d+\))?\s+(?:months?|years?))|"
                     r"\bsuccessive\s+(\w+(?:\s+\(\d+\))?[\s-]+(?:months?|years?))\s+(?:periods|terms)\b", re.I)


def _term(text: str, spans) -> list[RuleHit]:
    hits = []
    for s, e, sent in sentences(text, spans):
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
        if window is None and ref:
            sev, how = "medium", f"the notice window to stop it is set by reference ({ref.group(0)}): check it"
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
_LATE = re.compile(r"\blate\s+payments?\b[^.;]{0,80}\binterest\b|\binterest\b[^.;]{0,60}\b(?:late|overdue|unpaid)\b",
                   re.I)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent|per\s+cent)\s*(?:per\s+(annum|year|month)|a\s+(year|month))?",
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
