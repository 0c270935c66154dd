"""Expected answer types: what kind of value a question asks for, and which passages hold one.

"How long may the program keep the logs?" is answered by a sentence with a
duration; "Which court hears disputes?" by one that names a place or body;
"How much is the cap?" by an amount. Topical sentences around the answer
("logs are kept for auditing", "disputes shall be resolved amicably") share
the question's subject but hold no such value, and a bi-encoder ranks them as
high as the answer. Classic question answering systems used the expected
answer type to tell them apart; here it is a small additive bonus on the
passage score (:mod:`.document`), never a filter.

The rules are plain English grammar (which wh-word is the interrogative) and value shapes,
documented below and tested on hand-written phrasings and on every question of both dev sets
(their expected types written from the grammar, not from rankings).
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

# What a question asks for comes from its interrogative phrase: the wh-word that opens the
# question (after prepositions: "for how long", "in which court", "up to what moment"), opens a
# clause joined by "and"/"or"/"but" ("..., and who has to be told?"), follows a preposition
# inside a clause ("a limit on how much ...") or a verb of saying or knowing ("does it say who
# owns ..."). Elsewhere a wh-word is a relative pronoun ("customers who already got it",
# "machines whose clocks", "deals in which ...") or a conjunction ("what happens when ..."). A
# question may open with a subordinate clause or a phrase ("If ..., which court ...?", "When a
# company is sold, does ...?"): the question proper starts after the comma that ends it. "When"
# and "where" open a question only with subject-auxiliary inversion ("When does ...");
# followed by a subject they open such a clause. Yes/no questions expect no typed value.
_TIME, _MONEY = ("date", "duration"), ("money", "percent", "count")
_QUANTITY, _PERCENT = ("count", "money", "percent", "duration"), ("percent", "money")
_IDENT, _NAME = ("identifier", "count"), ("name",)

# Nouns after "what"/"which" ("which court", "what cut-off date", "what is the fee").
_NOUN_TYPES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys("date dates day days year years month deadline moment period".split(), _TIME),
    **dict.fromkeys("fee fees price prices amount amounts sum sums cost costs".split(), _MONEY),
    **dict.fromkeys("limit limits maximum minimum number size version cap most least".split(), _QUANTITY),
    **dict.fromkeys("rate rates percentage share".split(), _PERCENT),
    **dict.fromkeys("file files directory directories folder path paths option options switch flag flags "
                    "variable variables environment setting settings port socket command commands permission "
                    "permissions mode".split(), _IDENT),
    **dict.fromkeys("firm company authority organisation organization court courts country state jurisdiction "
                    "law laws agency body entity party person office department bank insurer arbitrator venue "
                    "city place".split(), _NAME),
}
# "how" + word.
_HOW = {**dict.fromkeys("long soon often quickly late".split(), _TIME),
        **dict.fromkeys("many large big deep high far old".split(), _QUANTITY), "much": _MONEY}
_HOW_MUCH_TIME = frozenset("time warning notice advance lead".split())
_TIME_UNITS = frozenset("seconds minutes hours days weeks months years".split())
_WH = frozenset("how what when where which who whom whose why whether".split())
_AUX = frozenset("am is are was were be do does did can could may might must shall should will would has have had "
                 "need".split())
_PREPS = frozenset("about above across after against along among around as at before behind below beneath beside "
                   "between beyond by concerning despite during for from in inside into near of off on onto out "
                   "outside over past per regarding since through throughout till to toward towards under until "
                   "up upon via with within without".split())
_SUBORD = frozenset("if when whenever while whilst once after before unless although though because since as where "
                    "wherever suppose supposing assuming given provided".split()) | _PREPS
_SAYING = frozenset("tell tells say says know knows specify specifies state states explain explains show shows ask "
                    "asks decide decides determine determines mention mentions define defines indicate indicates "
                    "list lists".split())
# Inside a clause, after a preposition: an embedded question ("a limit on how much", "depends on
# who signs", "until when") but not a relative ("deals in which", "the person to whom") nor a
# particle ("end up when ...": "when" is a conjunction there).
_PARTICLES = frozenset("up out off down away back over".split())
_EMBEDDED = {p: {"how", "what", "who"} for p in _PREPS - _PARTICLES}
for _p in ("on", "about", "of", "from", "to", "as"):
    _EMBEDDED[_p].add("where")  # "limits on where the firm is based"
for _p in ("until", "till", "by", "since", "from", "about"):
    _EMBEDDED[_p].add("when")  # "until when", "about when it ends"
_DETERMINERS = frozenset("the a an this that these those its their our my your his her any each every some".split())
_OPENERS = frozenset("and but so also then now ok okay well please".split())
_CLAUSE_ENDS = frozenset(",;:")
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*|[,;:]")
_SENTENCE = re.compile(r"[?!]+|\.(?=\s|$)")


def _words(sentence: str) -> list[str]:
    out = []
    for w in _WORD.findall(sentence.lower().replace("\u2019", "'")):
        if w.endswith("'s") and w[:-2] in _WH:  # "what's" -> "what is"
            out += [w[:-2], "is"]
        else:
            out.append(w)
    return out


def _skip_preps(ws: list[str], i: int) -> int:
    while i < len(ws) and ws[i] in _PREPS:
        i += 1
    return i


def _asks(ws: list[str], i: int) -> bool:
    """Does a clause that starts at ``ws[i]`` open with an interrogative (or is it a yes/no question)?"""
    j = _skip_preps(ws, i)
    if j >= len(ws):
        return False
    if ws[j] in ("when", "where") and j == i:  # bare "when"/"where": only with inversion
        return j + 1 >= len(ws) or ws[j + 1] in _AUX or ws[j + 1].endswith("n't")
    return ws[j] in _WH or (j == i and (ws[j] in _AUX or ws[j].endswith("n't")))


def _np_types(ws: list[str], i: int) -> set[str]:
    """Types named by the noun phrase after a wh-determiner, from ``ws[i]``: its head, the last noun
    of a type in the phrase ("which network socket number": a number)."""
    if i + 1 < len(ws) and ws[i] in ("is", "are", "was", "were") and ws[i + 1] in _DETERMINERS:  # "what is the fee"
        i += 2
    if i + 1 < len(ws) and ws[i] in ("kind", "type", "sort") and ws[i + 1] == "of":  # "what kind of licence"
        i += 2
    if i + 1 < len(ws) and ws[i] == "of" and ws[i + 1] in _DETERMINERS:  # "which of the courts"
        i += 2
    out: tuple[str, ...] = ()
    for w in ws[i : i + 3]:
        if w in _AUX or w in _PREPS or w in _WH or w in _DETERMINERS or w in _CLAUSE_ENDS or w.endswith("n't"):
            break
        out = _NOUN_TYPES.get(w.removesuffix("'s").removesuffix("'"), out)
    return set(out)


def _phrase_types(ws: list[str], p: int) -> set[str]:
    """Answer types of the interrogative phrase whose wh-word is ``ws[p]``."""
    w, nxt = ws[p], ws[p + 1] if p + 1 < len(ws) else ""
    prep = ws[p - 1] if p > 0 else ""
    if w == "how":
        after = ws[p + 2].rstrip("'") if p + 2 < len(ws) else ""  # "how many days' notice"
        if nxt == "much" and after in _HOW_MUCH_TIME:
            return set(_TIME)
        out = set(_HOW.get(nxt, ()))
        if nxt == "many" and after in _TIME_UNITS:
            out.update(_TIME)
        if prep == "by" and nxt in ("much", "many"):
            out.update(_PERCENT)
        return out
    if w == "when":
        return set(_TIME)
    if w == "where":
        return {"name", "identifier"}
    if w in ("who", "whom", "whose"):
        return set(_NAME)
    if w in ("what", "which"):
        if prep in ("until", "till", "within"):
            return set(_TIME)
        if w == "what" and nxt in ("does", "would", "will", "did") and p + 3 < len(ws) and ws[p + 3] == "cost":
            return set(_MONEY)
        return _np_types(ws, p + 1)
    return set()


def _interrogatives(ws: list[str]) -> list[int]:
    """Positions of the interrogative wh-words of one sentence (see the rules above)."""
    i = 0
    while i < len(ws) and (ws[i] in _OPENERS or ws[i] in _CLAUSE_ENDS):
        i += 1
    if i < len(ws) and not _asks(ws, i) and ws[i] in _SUBORD:  # "If ..., which ...?": skip the lead-in
        commas = [c for c in range(i, len(ws)) if ws[c] == ","]
        i = next((c + 1 for c in commas if _asks(ws, c + 1)), commas[0] + 1 if commas else len(ws))
    out = []
    if _asks(ws, i) and ws[_skip_preps(ws, i)] in _WH:
        out.append(_skip_preps(ws, i))
    for j in range(i + 1, len(ws)):
        w, before = ws[j], ws[j - 1]
        if w not in _WH:
            continue
        if before in ("and", "or", "but") or before in (";", ":"):
            if _asks(ws, j):
                out.append(j)
        elif before in _PREPS:
            k = j - 1
            while k > i and ws[k - 1] in _PREPS:
                k -= 1
            lead = ws[k - 1] if k > i else ""
            if k == i or lead in ("and", "or", "but", ";", ":") or w in _EMBEDDED.get(before, ()):
                out.append(j)  # "For how long ...", "..., and for how long ...", "a limit on how much ..."
        elif before in _SAYING or (before in ("me", "us", "them", "you") and j >= 2 and ws[j - 2] in _SAYING):
            k = j - 1 if before in _SAYING else j - 2
            if k == 0 or ws[k - 1] not in _DETERMINERS:  # "says who", not "the state which ..."
                out.append(j)
    return out


def question_types(question: str) -> frozenset[str]:
    """Answer types the question expects (empty for yes/no, why and open questions)."""
    out: set[str] = set()
    for sentence in _SENTENCE.split(question):
        ws = _words(sentence)
        for p in _interrogatives(ws):
            out |= _phrase_types(ws, p)
    return frozenset(out)


def passage_types(text: str) -> frozenset[str]:
    """Answer types of the values that ``text`` holds."""
    return frozenset(kind for kind, rx in _VALUES.items() if rx.search(text))


def type_mask(types: frozenset[str]) -> int:
    """Bit mask of ``types`` over :data:`ANSWER_TYPES` (for vectorised matching)."""
    return sum(1 << ANSWER_TYPES.index(t) for t in types)
