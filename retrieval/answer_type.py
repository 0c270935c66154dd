"""Expected answer types: what kind of value a question asks for, and which passages hold one.

"How long may the program keep the logs?" is answered by a sentence with a
duration; "Which court hears disputes?" by one that names a place or body;
"How much is the cap?" by an amount. Topical sentences around the answer
("logs are kept for auditing", "disputes shall be resolved amicably") share
the question's subject but hold no such value, and a bi-encoder ranks them as
high as the answer. Classic question answering systems used the expected
answer type to tell them apart; here it is a small additive bonus on the
passage score (:mod:`.document`), never a filter.

The rules are plain English wh-phrases and value shapes, documented below and
tested on hand-written cases; they are not tuned to any one document.
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_TYPES", "question_types", "passage_types", "type_mask"]

ANSWER_TYPES = ("money", "duration", "date", "percent", "count", "identifier", "name")

_NUM = (r"(?:\d[\d,.]*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
        r"thirty|forty|fifty|sixty|ninety|hundred|thousand|million|billion)")

# Value shapes in passages.
_VALUES: dict[str, re.Pattern[str]] = {
    "money": re.compile(
        r"[$\u20ac\u00a3\u00a5]\s?\d|\b(?:USD|EUR|GBP|CHF|JPY|CAD|AUD|INR|CNY)\b|"
        r"\b(?:dollars|euros?|francs|pounds sterling|yen|cents)\b", re.I),
    "duration": re.compile(
        rf"\b{_NUM}(?:\s*\(\d+\))?[\s-]*(?:business\s+|calendar\s+|working\s+)?"
        r"(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?)\b", re.I),
    "date": re.compile(
        r"\b(?:January|February|March|April|May|June|July|August|September|October|November|December)"
        r"\s+(?:\d{1,2},?\s+)?\d{4}\b|\b\d{1,2}\s+(?:January|February|March|April|May|June|July|August|"
        r"September|October|November|December)\s+\d{4}\b|\b\d{4}-\d{2}-\d{2}\b"),
    "percent": re.compile(r"\b\d[\d.,]*\s*(?:%|percent\b|per\s*cent\b)", re.I),
    "count": re.compile(rf"\b{_NUM}(?:\s*\([\d,.]+\))?\s+[a-z]", re.I),
    # paths, command-line options, environment variables, ports and octal modes
    "identifier": re.compile(
        r"(?<![\w<])/[\w.-]+/[\w./-]*|\$[A-Z_]{3,}|(?<!\w)--[a-z][\w-]+|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|"
        r"\b(?:port|mode)\s+\d+", re.I),
    # a multi-word proper name inside a sentence ("the laws of the Canton of Vaud", "Halvorsen Escrow AS")
    "name": re.compile(r"(?<=[a-z,;:] )[A-Z][a-z\u00e0-\u00ff]+(?:\s+(?:of\s+|de\s+|du\s+|des\s+|la\s+|&\s+)?"
                       r"[A-Z][\w.\u00e0-\u00ff-]+)+"),
}

# Wh-phrases and the answer types they expect (any of them).
_QUESTIONS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"\bhow much (?:time|warning|notice|advance|lead)\b|\bhow (?:long|soon|often|quickly|late)\b|"
                r"\bfor how long\b|\bwithin what\b|\bhow many (?:days|weeks|months|years|hours|minutes|seconds)\b",
                re.I), ("duration", "date")),
    # "when" only where it asks ("When does ...", "..., and when ..."), not "what happens when X".
    (re.compile(r"\buntil (?:when|what|which)\b|\bby when\b|\b(?:what|which) (?:date|day|year)\b|"
                r"(?:^\s*|, |\band )when\b", re.I),
     ("date", "duration")),
    (re.compile(r"\bhow much\b(?! (?:time|warning|notice|advance|lead)\b)|"
                r"\bwhat (?:does|would|will) (?:it|that) cost\b|"
                r"\b(?:what|which) (?:fee|price|amount|sum)\b", re.I), ("money", "percent", "count")),
    (re.compile(r"\bhow (?:many|large|big|deep|high|far|old)\b|"
                r"\bwhat (?:limit|maximum|minimum|number|size|version|cap)\b|"
                r"\b(?:the )?(?:most|least|maximum|minimum)\b|\bat most\b|\bup to what\b", re.I),
     ("count", "money", "percent", "duration")),
    (re.compile(r"\b(?:what|which) (?:rate|percentage|share)\b|\bby how much\b", re.I), ("percent", "money")),
    (re.compile(r"\b(?:what|which) (?:file|files|directory|folder|path|option|switch|flag|variable|environment|"
                r"setting|port|socket|command|permission|mode)\b", re.I), ("identifier", "count")),
    (re.compile(r"\bwhere\b", re.I), ("name", "identifier")),
    (re.compile(r"\bwho\b|\bwhom\b|\bwhose\b|\b(?:what|which) (?:firm|company|authority|organi[sz]ation|court|courts|"
                r"country|state|jurisdiction|law|laws|agency|body|entity|party|person|office|department|bank|"
                r"insurer|arbitrator|venue|city|place)\b", re.I), ("name",)),
]


def question_types(question: str) -> frozenset[str]:
    """Answer types the question expects (empty for yes/no, why and open questions)."""
    out: set[str] = set()
    for rx, types in _QUESTIONS:
        if rx.search(question):
            out.update(types)
    return frozenset(out)


def passage_types(text: str) -> frozenset[str]:
    """Answer types of the values that ``text`` holds."""
    return frozenset(kind for kind, rx in _VALUES.items() if rx.search(text))


def type_mask(types: frozenset[str]) -> int:
    """Bit mask of ``types`` over :data:`ANSWER_TYPES` (for vectorised matching)."""
    return sum(1 << ANSWER_TYPES.index(t) for t in types)
