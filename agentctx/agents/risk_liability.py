"""Red-flag rules of liability and indemnity (see :mod:`.risk_rules` for the list and severities).

``liability``: an uncapped liability or the claims a cap carves out, read from what is excepted;
``no_liability_cap``: the document-level hit when no limitation of liability was found; ``indemnity``:
only one side indemnifies, and whose side that is.
"""

from __future__ import annotations

import re

from agentctx.agents.risk_hit import RuleHit, sentences

__all__ = ["liability", "indemnity", "no_liability_cap"]

# The reader's side: the one that takes a licence, buys or pays for a service or programme ("Sponsor", the
# company that sponsors an event; not a "fiscal sponsor", the foundation that hosts a project).
_CUSTOMER_SIDE = re.compile(r"\b(?:you|your|licensee|customer|client|recipient|partner|user|buyer|subscriber|"
                            r"distributor|commercial\s+distributor|redistributor|(?<!fiscal\s)sponsor)\b", re.I)

# ---------------------------------------------------------------- liability
_UNLIMITED = re.compile(r"\bunlimited\s+liability\b|"
                        r"\bliability\b[^.;]{0,60}\b(?:is|shall\s+be|will\s+be)\s+unlimited\b|"
                        r"\bwithout\s+(?:any\s+)?limit(?:ation)?\s+(?:of|on|as\s+to)\s+(?:its\s+|their\s+)?liability\b",
                        re.I)
# "the liability of either party for", "liability to the Customer for": whose liability, before what for.
_WHOSE = r"(?:\s+(?:of|to)\s+[^.;:]{1,40}?)?"
_CARVE = re.compile(r"\b(?:cap|limitations?|limits?|exclusions?)\b[^.;]{0,80}\b(?:does|do|shall|will)\s+not\s+apply\b|"
                    r"\b(?:except|excluding|other\s+than|save|with\s+the\s+exception\s+of)\s+"
                    r"(?:for\s+|in\s+(?:the\s+)?cases?\s+of\s+)?"
                    r"[^.;]{0,120}\b(?:indemni(?:t|fication)|confidential|infring|gross\s+negligence|wil(?:l)?ful|fraud|death|"
                    r"personal\s+injury|data)|"
                    r"\b(?:neither\s+party\s+|nothing\b[^.;]{0,60}\b)(?:excludes?|limits?)\b"
                    r"[^.;]{0,40}\bliability" + _WHOSE + r"\s+for\b", re.I)
_BIG_EXPOSURE = re.compile(r"\bindemni(?:t|fication)|\bconfidential|\binfring|\bdata\b|\bintellectual\s+property\b",
                           re.I)


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
_EXCEPT = re.compile(r"\b(?:except|excluding|other\s+than|save|with\s+the\s+exception\s+of)\b", re.I)
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


def liability(text: str, spans) -> list[RuleHit]:
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
# The promise may carry an aside before its object ("agrees, at its own expense, to indemnify") or list its
# verbs with commas ("agrees to protect, indemnify and hold ... harmless"): missing either would hide a second
# indemnifier and report the other side's indemnity as the only one.
_INDEMNIFIER = re.compile(
    r"(?P<who>\b(?:each|either)\s+party\b|\bthe\s+parties\b|\b(?:[A-Z][\w&.'\u2019-]*\s+){0,3}[A-Z][\w&.'\u2019-]*|\byou\b)"
    r"\s+(?:shall|will|must|(?:hereby\s+)?(?:agrees?|undertakes?)(?:,[^,.;]{1,40},)?\s+to)\s+(?:\w+,?\s+){0,3}?"
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
# The side a form defines as whoever signs or accepts it ("the Open Source Organization ... signing or
# electronically accepting this Agreement ("Member")"): the reader's own side, as "you" is.
_ACCEPTING_SIDE = re.compile(r"\b(?:signing|accepting|executing)\s+"
                             r"(?:or\s+(?:electronically\s+)?(?:accepting|signing)\s+)?"
                             r"(?:this|these)\s+(?:Agreement|Terms|Contract)\b[^.;()]{0,60}\(\s*[\"\u201c]"
                             r"(?P<name>[^\"\u201d]{1,40})[\"\u201d]\s*\)")


def _accepting_side(text: str) -> str | None:
    m = _ACCEPTING_SIDE.search(text[:6000])
    return m["name"].strip().lower() if m else None


def indemnity(text: str, spans) -> list[RuleHit]:
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
    customer = bool(_CUSTOMER_SIDE.search(name)) or to_us or signer or name == _accepting_side(text)
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
