"""The governing-law rule (``governing_law_venue``): the law a contract chooses and the courts it names.

Medium when the courts sit in another jurisdiction than the law's, low otherwise (for the record);
low when either is a standard form's variable ("the State of Governing Law", "courts in
Jurisdiction"), which names no place to compare. ``law_named`` serves the report's cross-document
note too (pipelines/report.py).
"""

from __future__ import annotations

import re

from agentctx.agents.clause_lexicon import normalize
from agentctx.agents.risk_hit import RuleHit, sentences

__all__ = ["governing_law", "law_named"]


_LAW = re.compile(r"\blaws?\s+of\s+(?P<law>(?:the\s+)?(?:State|Commonwealth|Republic|Province|Kingdom)\s+of\s+"
                  r"[A-Z][\w]*"
                  r"(?:\s+[A-Z][\w]*)*|[A-Z][\w]*(?:\s+(?:and\s+)?[A-Z][\w]*)*)")
_VENUE = re.compile(r"\b(?:courts?|tribunals?)\s+(?:of|in|located\s+in|sitting\s+in|situated\s+in)\s+(?:the\s+)?"
                    r"(?P<venue>(?:State|Commonwealth|Republic|County|City)\s+of\s+[A-Z][\w]*(?:\s+[A-Z][\w]*)*|"
                    r"[A-Z][\w]*(?:\s+(?:and\s+)?[A-Z][\w]*)*)")


_PLACE_PREFIX = re.compile(r"^(?:the\s+)?(?:State|Commonwealth|Republic|Province|Kingdom|County|City)\s+of\s+",
                           re.I)


def _place_key(s: str) -> str:
    return _PLACE_PREFIX.sub("", s.strip()).split(",")[0].strip().lower()


def law_named(sentence: str) -> str | None:
    """The jurisdiction whose laws a sentence names, as written: "Delaware" of "the laws of the State
    of Delaware", "England and Wales"; None when it names none."""
    m = _LAW.search(normalize(sentence))
    return _PLACE_PREFIX.sub("", m["law"].strip()).strip(" .") if m else None


# Words a standard form uses for a value it defines elsewhere (a cover page or order form fills in
# "Governing Law" and "Jurisdiction"): a law or venue spelt only with them names no place.
_PLACEHOLDER_WORDS = frozenset({"governing", "law", "laws", "jurisdiction", "jurisdictions", "venue", "forum",
                                "courts", "court", "chosen", "designated", "applicable", "specified", "selected"})


def _placeholder(name: str) -> bool:
    words = re.findall(r"[a-z]+", _PLACE_PREFIX.sub("", name.strip()).lower())
    return bool(words) and all(w in _PLACEHOLDER_WORDS for w in words)


def governing_law(text: str, spans) -> list[RuleHit]:
    law = venue = None
    for s, e, sent in sentences(text, spans):
        if law is None and re.search(r"\bgovern|\bconstrued|\bapplicable\s+law|\bgoverning\s+law", sent, re.I):
            m = _LAW.search(sent)
            if m:
                law = (m["law"], s, e)
        if venue is None:
            m = _VENUE.search(sent)
            if m:
                venue = (m["venue"], s, e)
    if law is None and venue is None:
        return []
    refs = [x[0] for x in (law, venue) if x and _placeholder(x[0])]
    if refs:  # a form's variables: comparing them would report a mismatch between two blanks
        found = law or venue
        named = " and ".join(f"\u201c{_PLACE_PREFIX.sub('', r).strip()}\u201d" for r in refs)
        return [RuleHit("governing_law_venue", "governing_law", "low", found[1], found[2],
                        f"Governing law and venue are set by reference ({named}), a value defined elsewhere "
                        "(a cover page or order form).",
                        "Check the values filled in where the agreement defines them.",
                        {"law": law[0] if law else None, "venue": venue[0] if venue else None,
                         "by_reference": True})]
    if law and venue and _place_key(law[0]) != _place_key(venue[0]) \
            and _place_key(law[0]) not in _place_key(venue[0]) and _place_key(venue[0]) not in _place_key(law[0]):
        return [RuleHit("governing_law_venue", "governing_law", "medium", law[1], law[2],
                        f"The agreement is governed by the laws of {law[0]} but disputes go to the courts of "
                        f"{venue[0]}: a court applying foreign law adds cost and uncertainty.",
                        "Align the governing law and the courts, preferably with your home jurisdiction.",
                        {"law": law[0], "venue": venue[0]})]
    found = law or venue
    what = (f"the laws of {law[0]}" if law else "no governing law") + \
           (f", disputes in the courts of {venue[0]}" if venue else ", no venue named")
    return [RuleHit("governing_law_venue", "governing_law", "low", found[1], found[2],
                    f"Governing law and venue: {what}.",
                    "Confirm that this law and forum are acceptable to you.",
                    {"law": law[0] if law else None, "venue": venue[0] if venue else None})]
