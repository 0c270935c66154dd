"""The governing-law rule (``governing_law_venue``): the law a contract chooses and the courts it names.

Medium when the courts (or an arbitration tribunal's seat, named as arbitration) sit in another
jurisdiction than the law's, low otherwise (for the record);
low when either is a standard form's variable ("the State of Governing Law", "courts in
Jurisdiction"), which names no place to compare. ``law_named`` serves the report's cross-document
note too (pipelines/report.py).
"""

from __future__ import annotations

import re

from agentctx.agents.clause_lexicon import normalize
from agentctx.agents.risk_hit import RuleHit, sentences

__all__ = ["governing_law", "law_named"]


_STATE_WORDS = r"(?:[Ss]tate|[Cc]ommonwealth|[Rr]epublic|[Pp]rovince|[Kk]ingdom)"
_LAW = re.compile(r"\blaws?\s+of\s+(?P<law>(?:the\s+)?" + _STATE_WORDS + r"\s+of\s+[A-Z][\w]*(?:\s+[A-Z][\w]*)*|"
                  r"(?:the\s+)?[A-Z][\w]*(?:\s+(?:and\s+)?[A-Z][\w]*)*)")
# "the laws of the United States of America and the State of Delaware": the state's law is the one a court
# of a state applies and the one to compare with the venue.
_STATE_LAW = re.compile(r"\b(?P<law>" + _STATE_WORDS + r"\s+of\s+[A-Z][\w]*(?:\s+[A-Z][\w]*)*)")
# "governed by English law": the law named by its adjective, read as its place.
_LAW_ADJECTIVES = {"english": "England", "scottish": "Scotland", "scots": "Scotland", "irish": "Ireland",
                   "german": "Germany", "french": "France", "swiss": "Switzerland", "dutch": "the Netherlands",
                   "swedish": "Sweden", "danish": "Denmark", "finnish": "Finland", "norwegian": "Norway",
                   "belgian": "Belgium", "austrian": "Austria", "italian": "Italy", "spanish": "Spain",
                   "japanese": "Japan", "israeli": "Israel", "canadian": "Canada", "australian": "Australia"}
_LAW_ADJ = re.compile(r"\b(?:governed\s+by|subject\s+to|in\s+accordance\s+with|under)\s+(?:the\s+)?"
                      r"(?P<adj>[A-Z][a-z]+)\s+law\b")
_VENUE = re.compile(r"\b(?:courts?|tribunals?)\s+(?:of|in|located\s+in|sitting\s+in|situated\s+in|residing\s+in)\s+"
                    r"(?:the\s+)?"
                    r"(?P<venue>(?:" + _STATE_WORDS + r"|[Cc]ounty|[Cc]ity)(?:\s+and\s+[Cc]ounty)?\s+of\s+[A-Z][\w]*"
                    r"(?:\s+[A-Z][\w]*)*|[A-Z][\w]*(?:\s+(?:and\s+)?[A-Z][\w]*)*(?:\s+(?:county|city|parish)\b)?)"
                    # a county or city with its state: "San Francisco County, California" ("San Francisco county,
                    # California", the word in lower case)
                    r"(?P<within>,\s*[A-Z][\w]*(?:\s+[A-Z][\w]*)*)?")
# "the California courts", "the English courts" (not "the Federal courts", "the State courts").
_VENUE_ADJ = re.compile(r"\bthe\s+(?P<venue>(?!(?:Federal|State|Supreme|District|County|Local|Competent|Relevant)\b)"
                        r"[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\s+[Cc]ourts\b")


# A venue stated as such: "Venue shall be Kansas", "The seat of the arbitration will be London".
_VENUE_IS = re.compile(r"\b(?:[Vv]enue|[Ss]eat|[Pp]lace)\s+(?:of\s+(?:the\s+|any\s+)?(?:arbitration|proceedings?)\s+)?"
                       r"(?:shall|will|must)\s+be\s+(?:in\s+)?(?:the\s+)?"
                       r"(?P<venue>(?:" + _STATE_WORDS + r"\s+of\s+)?[A-Z][\w]*(?:\s+[A-Z][\w]*)*)")
# The courts named by a defined term: "submits to the personal jurisdiction of the Dispute Resolution Jurisdiction".
# (a term of its own words, not "the jurisdiction of the Court of Justice of the European Union")
_VENUE_TERM = re.compile(r"\bjurisdiction\s+of\s+the\s+(?P<venue>(?:[A-Z][\w]*\s+){1,3}(?:Jurisdiction|Courts?|Venue|"
                         r"Forum))\b(?!\s+of\b)")
# The law named by a defined term, the value of a cover page: "This Agreement is governed by the Governing Law".
_LAW_REF = re.compile(r"\bgoverned\s+(?:\w+\s+){0,3}?by\s+(?:the\s+)?(?P<ref>(?:[A-Z][\w]*\s+){0,2}Law)\b")


def _law_in(sentence: str) -> str | None:
    """The law a sentence chooses, as written ("State of Delaware", "England"); None when none."""
    m = _LAW.search(sentence)
    if m:
        law = m["law"]
        if not re.match(r"(?:the\s+)?" + _STATE_WORDS, law):
            state = _STATE_LAW.search(sentence, m.end())
            law = "the " + state["law"] if state else re.sub(r"^the\s+", "", law)
        where = re.match(r"\s+(?:where|in\s+which)\b[^,;.\u2014-]*", sentence[m.end():])
        return law + where.group(0) if where else law
    m = _LAW_ADJ.search(sentence)
    if m and m["adj"].lower() in _LAW_ADJECTIVES:
        return _LAW_ADJECTIVES[m["adj"].lower()]
    m = _LAW_REF.search(sentence)
    return m["ref"] if m else None


def _venue_in(sentence: str) -> str | None:
    m = _VENUE.search(sentence)
    if m:
        # "an arbitration tribunal in Columbia, Maryland": the seat of an arbitration, not courts.
        seat = _ARBITRATION if re.match(r"tribunal", m.group(0), re.I) and re.search(r"\barbitra", sentence,
                                                                                     re.I) else ""
        return m["venue"] + (m["within"] or "") + seat
    m = _VENUE_ADJ.search(sentence)
    if m:
        return _LAW_ADJECTIVES.get(m["venue"].lower(), m["venue"] + _BY_NAME_ONLY)
    m = _VENUE_IS.search(sentence)
    if m:
        return m["venue"] + _VENUE_STATED
    m = _VENUE_TERM.search(sentence)
    return m["venue"] if m else None


# Courts named by a place alone ("the Paris Courts"): without a gazetteer the review cannot tell whether
# the place lies in the law's jurisdiction, so it reports both for the record instead of a mismatch.
_BY_NAME_ONLY = "\u200b"
# Disputes go to an arbitration seated there: the rationale names arbitration, not courts.
_ARBITRATION = "\u200c"
# A venue stated as "Venue shall be X": arbitration's when the sentences before it speak of arbitration.
_VENUE_STATED = "\u200d"
_MARKS = _BY_NAME_ONLY + _ARBITRATION + _VENUE_STATED


_PLACE_PREFIX = re.compile(r"^(?:the\s+)?(?:State|Commonwealth|Republic|Province|Kingdom|County|City)"
                           r"(?:\s+and\s+County)?\s+of\s+", re.I)


def _place_key(s: str) -> str:
    return _PLACE_PREFIX.sub("", s.strip()).split(",")[0].strip().lower()


def _same_place(law: str, venue: str) -> bool:
    """Whether the courts sit where the law is: "England" and "England and Wales"; "State of California"
    and "San Francisco County, California" (a county or city with its state)."""
    lk = _place_key(law)
    return any(v and (lk == v or lk in v or v in lk) for v in (_place_key(p) for p in venue.split(",")))


def law_named(sentence: str) -> str | None:
    """The jurisdiction whose laws a sentence names, as written: "Delaware" of "the laws of the State
    of Delaware", "England and Wales"; None when it names none."""
    law = _law_in(normalize(sentence))
    return _PLACE_PREFIX.sub("", law.strip()).strip(" .") if law else None


# Words a standard form uses for a value it defines elsewhere (a cover page or order form fills in
# "Governing Law" and "Jurisdiction"): a law or venue spelt only with them names no place.
_PLACEHOLDER_WORDS = frozenset({"governing", "law", "laws", "jurisdiction", "jurisdictions", "venue", "forum",
                                "courts", "court", "chosen", "designated", "applicable", "specified", "selected"})


def _placeholder(name: str) -> bool:
    words = re.findall(r"[a-z]+", _PLACE_PREFIX.sub("", name.strip()).lower())
    return bool(words) and all(w in _PLACEHOLDER_WORDS for w in words)


def _forum(place: str, arbitration: bool) -> str:
    return f"arbitration in {place}" if arbitration else f"the courts of {place}"


def _definition(term: str, text: str) -> str | None:
    """What the document says a defined term means ("Governing Law" means the laws of the state of Delaware.)."""
    m = re.search(r"[\"\u201c]" + re.escape(term) + r"[\"\u201d]\s+(?:means|shall\s+mean|is)\s+([^.;]{0,200})", text)
    return m.group(1) if m else None


def _defined_term(name: str, text: str) -> bool:
    """Whether a law or venue as read is a term the document defines (a value set elsewhere, maybe a blank)."""
    return bool(re.match(r"[A-Z]", name)) and _definition(name, text) is not None


def _defined(found, text: str, read):
    """A law or venue named by a defined term, read from the term's definition when it names a place:
    "Governing Law" -> "the state of Delaware (“Governing Law”, as defined)"; else as it was."""
    if not found or not (_placeholder(found[0]) or _defined_term(found[0], text)):
        return found
    meant = _definition(found[0], text)
    place = read(meant) if meant else None
    if place and not _placeholder(place.rstrip(_MARKS)):
        return (f"{place.rstrip(_MARKS)} (\u201c{found[0]}\u201d, as defined)", found[1], found[2])
    return found


def governing_law(text: str, spans) -> list[RuleHit]:
    law = venue = None
    by_name_only = arbitration = False
    sents = sentences(text, spans)
    for i, (s, e, sent) in enumerate(sents):
        if law is None and re.search(r"\bgovern|\bconstrued|\bapplicable\s+law|\bgoverning\s+law", sent, re.I):
            named = _law_in(sent)
            if named:
                law = (named, s, e)
        if venue is None:
            named = _venue_in(sent)
            if named:
                venue = (named, s, e)
                by_name_only = named.endswith(_BY_NAME_ONLY)
                arbitration = named.endswith(_ARBITRATION) or (named.endswith(_VENUE_STATED) and any(
                    re.search(r"\barbitra", x, re.I) for _, _, x in sents[max(0, i - 4):i + 1]))
                venue = (named.rstrip(_MARKS), s, e)
    if law is None and venue is None:
        return []
    law = _defined(law, text, _law_in)
    venue = _defined(venue, text, _venue_in)
    refs = [x[0] for x in (law, venue) if x and (_placeholder(x[0]) or _defined_term(x[0], text))]
    if refs:  # a form's variables: comparing them would report a mismatch between two blanks
        found = law or venue
        named = " and ".join(f"\u201c{_PLACE_PREFIX.sub('', r).strip()}\u201d" for r in refs)
        known = f"the laws of {law[0]}; " if law and law[0] not in refs else ""
        return [RuleHit("governing_law_venue", "governing_law", "low", found[1], found[2],
                        f"Governing law and venue: {known}the forum is set by reference ({named}), a value "
                        "defined elsewhere or left blank." if known else
                        f"Governing law and venue are set by reference ({named}), a value defined elsewhere "
                        "(a cover page or order form).",
                        "Check the values filled in where the agreement defines them.",
                        {"law": law[0] if law else None, "venue": venue[0] if venue else None,
                         "by_reference": True})]
    if law and venue and not by_name_only and not _same_place(law[0], venue[0]):
        return [RuleHit("governing_law_venue", "governing_law", "medium", law[1], law[2],
                        f"The agreement is governed by the laws of {law[0]} but disputes go to "
                        f"{_forum(venue[0], arbitration)}: {'arbitrators' if arbitration else 'a court'} "
                        "applying foreign law adds cost and uncertainty.",
                        "Align the governing law and the courts, preferably with your home jurisdiction.",
                        {"law": law[0], "venue": venue[0]})]
    found = law or venue
    what = (f"the laws of {law[0]}" if law else "no governing law") + \
           (f", disputes {'to' if arbitration else 'in'} {_forum(venue[0], arbitration)}" if venue
            else ", no venue named")
    return [RuleHit("governing_law_venue", "governing_law", "low", found[1], found[2],
                    f"Governing law and venue: {what}.",
                    "Confirm that this law and forum are acceptable to you.",
                    {"law": law[0] if law else None, "venue": venue[0] if venue else None})]
