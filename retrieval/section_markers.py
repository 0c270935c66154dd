"""Clause markers and titles of a document's blocks: what opens a section and what it is called.

A block of :mod:`.sentences` may open with a clause number ("ARTICLE 12.", "8.1", "(a)", "iv)"), a
Markdown heading marker ("## "), or both ("3.  # *Restrictions*", a numbered heading kept as Markdown
by a converter); after it may come an inline title ("8.1 Liability Caps. ..."). :mod:`.structure`
reads these helpers to decide where sections start; :mod:`.section_tree` nests them.
"""

from __future__ import annotations

import re

_KEYWORDS = ("ARTICLE|Article|SECTION|Section|CLAUSE|Clause|PART|Part|CHAPTER|Chapter|SCHEDULE|Schedule|"
             "EXHIBIT|Exhibit|ANNEX|Annex|APPENDIX|Appendix|ATTACHMENT|Attachment")


# Styles that open a new top level whatever is open ("SCHEDULE 1", "PART 2", "EXHIBIT A").
_TOP_KEYWORDS = frozenset("part chapter schedule exhibit annex appendix attachment".split())


# Numbers written as words ("ARTICLE NINE", "Part Twenty-One"): some forms spell their article numbers.
_UNITS = "one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_SPELLED_VALUE = {w: i + 1 for i, w in enumerate(_UNITS)} | {w: i + 10 for i, w in enumerate(_TEENS)} | _TENS
_SPELLED = (rf"(?i:(?:{'|'.join(_TENS)})(?:[- ](?:{'|'.join(_UNITS)}))?|{'|'.join(_TEENS)}|{'|'.join(_UNITS)})")
_ROMAN_VALUE = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


# "Section 2 - Scope", "ARTICLE 12. GOVERNING LAW", "ARTICLE NINE", "Exhibit A" alone; not "Exhibit A attached"
# or "Section 2.1 of this License" at the start of a wrapped line of running text, nor "Clause 8.1, each party ..."
# (a separator "." followed by a digit is the decimal point of a cross-reference, not the end of a heading number).
_KW = re.compile(rf"(?P<kw>{_KEYWORDS})\s+(?P<num>\d{{1,3}}(?:\.\d{{1,3}})*|[IVXLC]{{1,6}}|{_SPELLED}|[A-Z])\b\.?"
                 r"(?:\s*[-\u2013\u2014:.](?!\d)\s*|[ \t]*$|[ \t]*\n|\s+(?=[A-Z\"\u201c(]))", re.M)


_NUM = re.compile(r"(?P<num>\d{1,3}(?:\.\d{1,3}){0,4})(?P<close>[.)]|(?=\s))(?:[ \t]+|(?=[A-Z\"\u201c]))")


_PAREN = re.compile(r"\(\s*(?P<num>\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,6})\s*\)[ \t]*")


_LETTER = re.compile(r"(?P<num>[a-zA-Z]|[ivxlcIVXLC]{1,6})(?P<close>[.)])[ \t]+")


_MD = re.compile(r"(?P<hashes>#{1,6})[ \t]+")


_ROMAN = re.compile(r"[ivxlc]{1,6}", re.I)


_SMALL_WORDS = frozenset("a an and as at by for from in of on or the to with under upon its their".split())


_VERBS = re.compile(r"\b(?:shall|will|may|must|means?|is|are|agrees?|grants?|hereby|has|have)\b")


_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][\w'\u2019&/-]*")


# Emphasis opened before a clause number ("**8.\tFees**.", "__Section 2.__"): standard forms published as
# Markdown bold their article headings and leave the sub-clauses plain ("8.1.\tInvoices."). Without reading
# through it the articles are no sections and "8.1" nests under the previous article's last sub-clause.
_EMPHASIS = re.compile(rf"[*_]{{1,3}}(?=\d|(?:{_KEYWORDS})\s)")


def _marker(line: str) -> tuple[str, str, str, int] | None:
    """(style, number, label, end offset) of a clause number at the start of ``line``."""
    if (em := _EMPHASIS.match(line)) and (mk := _plain_marker(line[em.end():])) is not None \
            and not mk[0].startswith("md"):
        return mk[0], mk[1], mk[2], em.end() + mk[3]
    return _plain_marker(line)


def _plain_marker(line: str) -> tuple[str, str, str, int] | None:
    if m := _MD.match(line):
        return f"md{len(m['hashes'])}", "", "", m.end()
    if m := _KW.match(line):
        kw = m["kw"].lower()
        return f"kw:{kw}", m["num"], line[: m.end()].strip().rstrip(": "), m.end()
    if m := _NUM.match(line):
        if m["close"] == "" and ("." not in m["num"] or line[m.end():m.end() + 1].islower()):
            return None  # "5 days", "2.1 of this License": a number in running text is no clause number
        depth = m["num"].count(".") + 1
        return f"num{depth}", m["num"], line[: m.end()].strip(), m.end()
    if m := _PAREN.match(line):
        return f"({_letter_style(m['num'])})", m["num"], line[: m.end()].strip(), m.end()
    if m := _LETTER.match(line):
        return f"{_letter_style(m['num'])}{m['close']}", m["num"], line[: m.end()].strip(), m.end()
    return None


def _lead_in(rest: str) -> bool:
    """A Markdown heading line that reads as a sentence or its lead-in, not a title ("## For purposes of
    this Agreement, a "Change of Control" means either:"): a converter marks list lead-ins as headings."""
    rest = rest.strip().strip("*_ ")
    return rest.endswith(":") or bool(_VERBS.search(rest))


def _md_level(line: str, mk: tuple[str, str, str, int] | None) -> int | None:
    """The Markdown heading level of a line ("## x": 2; "3.  # *Title*": 1, a numbered heading kept as
    Markdown by a converter), None without one."""
    if mk is None:
        return None
    if mk[0].startswith("md"):
        return int(mk[0][2:])
    m = _MD.match(line, mk[3])
    return len(m["hashes"]) if m else None


def ordinal(num: str) -> int | None:
    """The value of a whole clause number as written: "9", "IX", "NINE", "Twenty-One"; None for "9.1", "a", "B"."""
    if num.isdigit():
        return int(num)
    word = num.lower().replace(" ", "-")
    if word in _SPELLED_VALUE:
        return _SPELLED_VALUE[word]
    if "-" in word and word.split("-")[0] in _TENS and word.split("-")[1] in _UNITS:
        return _TENS[word.split("-")[0]] + _UNITS.index(word.split("-")[1]) + 1
    if num.isupper() and all(c in _ROMAN_VALUE for c in num):  # "ARTICLE I" is one, not a letter
        vals = [_ROMAN_VALUE[c] for c in num]
        return sum(-v if i + 1 < len(vals) and v < vals[i + 1] else v for i, v in enumerate(vals))
    return None


def _letter_style(num: str) -> str:
    if num.isdigit():
        return "pnum"
    if len(num) > 1 or num in "ivxlcIVXLC":
        kind = "roman"  # "i" may still be a letter after "h": resolved against the open styles
    else:
        kind = "alpha"
    return kind.upper() if num.isupper() else kind


# The opening of a sentence set in capitals, not a title: "8.2 WITH THE EXCEPTION OF MEMBER'S: (A) ... , THE TOTAL
# LIABILITY ... SHALL BE LIMITED TO ...", "EXCEPT AS PROVIDED IN SECTION 9:", "SUBJECT TO SECTION 4:".
_SENTENCE_LEAD = re.compile(r"(?:with\s+the\s+exception\s+of|except|excluding|subject\s+to|notwithstanding|"
                            r"without\s+limiting|in\s+no\s+event|to\s+the\s+(?:maximum\s+|fullest\s+)?extent)\b", re.I)


def _inline_title(text: str, start: int, end: int) -> tuple[str, int] | None:
    """A short title after a clause number: "Liability Caps." of "8.1 Liability Caps. Each party".

    Returns (title, offset where the body starts) or None. A title has at most 10 words,
    mostly capitalised, no verb of an operative sentence, and ends with ". " or ":".
    """
    # The stop may be followed by closing emphasis ("***Term*.** The term ..."), and the title may be
    # preceded by a Markdown heading marker ("1.  # *Purchase of Shares*. ..."): a converted Word
    # document keeps both around the title.
    m = re.compile(r"[.:][*_]*(?=\s|$)|\s[-\u2013\u2014]\s").search(text, start, min(end, start + 120))
    if not m:
        return None
    cand = text[start:m.start()].strip().strip("*_# ").strip()
    words = _WORD.findall(cand)
    if not words or len(cand.split()) > 10 or len(cand) < 3 or _VERBS.search(cand) or _SENTENCE_LEAD.match(cand):
        return None
    sig = [w for w in words if w.lower() not in _SMALL_WORDS]
    if not sig or sum(w[0].isupper() for w in sig) / len(sig) < 0.75:
        return None
    body = m.end()
    while body < end and text[body].isspace():
        body += 1
    return cand, body


def _unbox(text: str, start: int, end: int) -> tuple[int, int]:
    """The inside of a line drawn in a box of asterisks ("*  7. Limitation of Liability   *")."""
    s, e = start, end
    if text[s] == "*" and text[e - 1] == "*" and e - s > 2:
        s += 1
        e -= 1
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
    return s, e


def _is_title_text(s: str) -> bool:
    words = s.split()
    return 0 < len(words) <= 14 and len(s) <= 120


def _looks_like_title(rest: str) -> bool:
    """A clause number's text that is a title by itself: one short line of capitalised words."""
    rest = rest.strip()
    if not rest or "\n" in rest or rest[-1] in ",;:" or len(rest.split()) > 10 or _VERBS.search(rest):
        return False
    if rest.endswith(".") and " " in rest.rstrip(".") and not rest.isupper() and len(rest.split()) > 6:
        return False
    sig = [w for w in _WORD.findall(rest) if w.lower() not in _SMALL_WORDS]
    return bool(sig) and sum(w[0].isupper() for w in sig) / len(sig) >= 0.75


# A signature block: "IN WITNESS WHEREOF, ...", then the sides' names ("BRIGHTWATER LOOMS INC."), "By: ____",
# "Name:", "Title:", "Date:" lines. It closes the agreement; it is no clause of the last article.
_WITNESS = re.compile(r"^\W{0,3}IN\s+WITNESS\s+WHEREOF\b", re.I)
# "By:" opens one only as a signature line: a blank to sign on, "/s/", nothing, or a short name ("By: Ilse Varga"),
# not "By: registered mail, to the address above".
_SIG_OPEN = re.compile(r"^\W{0,3}(?i:By|Signature|Signed)\s*:[ \t]*(?:_{2,}|/s/|$|(?:[A-Z][\w.'\u2019-]*[ \t]*){1,5}$)",
                       re.M)
_SIG_FIELD = re.compile(r"^\W{0,3}(?:By|Name|Print(?:ed)?\s+Name|Title|Its|Date|Signature|Signed|Witness|"
                        r"Authori[sz]ed\s+Signatory)\s*:", re.I)


def _signature_opens(line: str) -> str | None:
    """How ``line`` opens a signature block: "witness" ("IN WITNESS WHEREOF, ..."), "field" ("By: ____"), None."""
    if _WITNESS.match(line):
        return "witness"
    if _SIG_OPEN.match(line) and len(line) <= 200:
        return "field"
    return None


def _signature_line(line: str) -> bool:
    """A line of a signature block that is not text to quote: a field ("Name: ...") or a short line (a name)."""
    return bool(_SIG_FIELD.match(line)) or ("\n" not in line.strip() and len(line) <= 120)
