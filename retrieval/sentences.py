"""Blocks and sentences of real documents, as character spans.

Real documents are not one sentence per line. Licences and filings are often
hard-wrapped at ~72 columns, so a newline usually continues the sentence;
contracts number their clauses ("8.1", "(a)", "ARTICLE 12.") and put headings
on lines of their own. This module finds:

* **blocks**: runs of lines that belong together (a paragraph, a numbered
  item, a heading). A blank line ends a block, and so does a line that starts
  like a new item (a clause number, a list marker, a Markdown ``#``) or a line
  that is a heading by itself (short, no closing punctuation).
* **sentences** inside a block: split after ``.``, ``!`` or ``?`` when the next
  word starts like a sentence (capital letter, digit, quote, bracket), but not
  after common abbreviations ("e.g.", "Inc.", "U.S.", "Sec."), initials or
  clause numbers ("1.1"). A newline inside a block is never a boundary.

Everything is a ``(start, end)`` span of the original text with surrounding
whitespace trimmed, so callers can quote the source verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Block", "blocks", "sentences", "sentence_spans", "is_heading_line"]

# A line that opens a new item: clause numbers ("1.", "8.1", "12.3.4)"), bracketed
# letters or romans ("(a)", "a)", "(iv)"), bullets, Markdown headings, "ARTICLE 5"/"Section 2".
_ITEM_START = re.compile(
    r"""^[ \t]*(?:
        \#{1,6}[ \t]                                  # Markdown heading
      | [-*\u2022\u25aa][ \t]                         # bullet
      | \(?(?:\d{1,3}(?:\.\d{1,3}){0,4}|[a-zA-Z]|[ivxlcIVXLC]{1,6})[.)][ \t]   # 1.  8.1  a)  (iv)
      | \(\s*(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,6})\s*\)[ \t]?               # (a) (12)
      | (?:ARTICLE|Article|SECTION|Section|Clause|CLAUSE|Schedule|SCHEDULE
           |Exhibit|EXHIBIT|Annex|ANNEX|Appendix|APPENDIX)\b
    )""",
    re.VERBOSE,
)
_BLANK = re.compile(r"\n[ \t\f\v]*\n")
_LINE = re.compile(r"[^\n]*\n?")

# Lower-cased words that end with a period without ending a sentence.
_ABBREV = frozenset(
    """e.g i.e etc vs v cf al inc ltd llc llp plc co corp no nos sec secs art arts para paras
    p pp cl ch mr mrs ms dr prof st jr sr u.s u.k e.u u.s.a n.a s.a b.v g.m.b.h fig eq approx
    dept est govt jan feb mar apr jun jul aug sep sept oct nov dec rev ed eds vol op ibid
    """.split()
)
_SENT_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s+[\"'\u201c\u2018(\[]?[A-Z0-9\u00c0-\u00de])")


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph, item or heading: ``text[start:end]``; ``heading`` when it is a title line."""

    start: int
    end: int
    heading: bool


def is_heading_line(line: str) -> bool:
    """A line that is a title by itself: short, no sentence punctuation at its end.

    "ARTICLE 12. GOVERNING LAW", "7. Assignment", "## Termination" and "LIMITATION OF
    LIABILITY" are headings; "the Licensee shall pay within 30 days." is not.
    """
    s = line.strip()
    if not s or len(s) > 90:
        return False
    if s.startswith("#"):
        return True
    letters = [c for c in s if c.isalpha()]
    if not letters:
        return False
    if s[-1] in ".;:,!?" and not re.fullmatch(r".*\b(?:\d+(?:\.\d+)*|[A-Z])\.", s):
        # ends like a sentence (but "ARTICLE 12." or "Section 4.2." still count)
        return sum(c.isupper() for c in letters) / len(letters) > 0.8 and len(s.split()) <= 10
    words = s.split()
    if len(words) > 12:
        return False
    caps = sum(1 for w in words if w[:1].isupper() or not w[:1].isalpha())
    return caps / len(words) >= 0.6


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    out = []
    pos = start
    for m in _LINE.finditer(text, start, end):
        if m.start() == m.end():
            break
        out.append((m.start(), m.end()))
        pos = m.end()
    if pos < end:
        out.append((pos, end))
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def blocks(text: str) -> list[Block]:
    """Blocks of ``text`` in order, as trimmed spans (never empty)."""
    out: list[Block] = []
    para_start = 0
    bounds = [m.start() for m in _BLANK.finditer(text)] + [len(text)]
    for para_end in bounds:
        cur: tuple[int, int] | None = None
        cur_heading = False
        for ls, le in _lines(text, para_start, para_end):
            line = text[ls:le]
            if not line.strip():
                continue
            heading = is_heading_line(line)
            # A new block starts at an item marker, at a heading line, and after a heading line.
            if cur is None or heading or cur_heading or _ITEM_START.match(line):
                if cur is not None:
                    s, e = _trim(text, *cur)
                    if e > s:
                        out.append(Block(s, e, cur_heading))
                cur, cur_heading = (ls, le), heading
            else:
                cur = (cur[0], le)
        if cur is not None:
            s, e = _trim(text, *cur)
            if e > s:
                out.append(Block(s, e, cur_heading))
        para_start = para_end
    return out


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``text[dot]`` closes an abbreviation, initial or clause number."""
    j = dot
    while j > 0 and not text[j - 1].isspace() and text[j - 1] not in "(\"'\u201c":
        j -= 1
    word = text[j:dot].lower()
    if not word:
        return False
    if word in _ABBREV or word.rstrip(".") in _ABBREV:
        return True
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
        return True
    return bool(re.fullmatch(r"\d+(?:\.\d+)*", word)) and (dot - j) <= 6 and _starts_item(text, j)


def _starts_item(text: str, j: int) -> bool:
    """A clause number at the start of its line ("1.", "8.1.") is no sentence end."""
    k = j
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    return k == 0 or text[k - 1] == "\n"


def sentence_spans(text: str, start: int, end: int, max_chars: int = 600) -> list[tuple[int, int]]:
    """Sentences of ``text[start:end]`` (one block), trimmed; long ones are cut at ``;`` or spaces."""
    out: list[tuple[int, int]] = []
    s = start
    for m in _SENT_END.finditer(text, start, end):
        last = m.start()  # first char of the closing punctuation run
        if text[last] == "." and _is_abbreviation(text, last):
            continue
        a, b = _trim(text, s, m.end())
        if b > a:
            out.append((a, b))
        s = m.end()
    a, b = _trim(text, s, end)
    if b > a:
        out.append((a, b))
    return [piece for span in out for piece in _cut_long(text, span, max_chars)]


def _cut_long(text: str, span: tuple[int, int], max_chars: int) -> list[tuple[int, int]]:
    a, b = span
    if b - a <= max_chars:
        return [span]
    pieces = []
    while b - a > max_chars:
        window = text[a : a + max_chars]
        cut = max(window.rfind("; "), window.rfind(": "))
        if cut < max_chars // 3:
            cut = window.rfind(" ")
        if cut <= 0:
            cut = max_chars - 1
        pieces.append(_trim(text, a, a + cut + 1))
        a = _trim(text, a + cut + 1, b)[0]
    pieces.append((a, b))
    return [p for p in pieces if p[1] > p[0]]


def sentences(text: str, max_chars: int = 600) -> list[tuple[int, int]]:
    """All sentences of ``text`` in order: blocks first, then sentences inside each block."""
    return [sp for blk in blocks(text) for sp in sentence_spans(text, blk.start, blk.end, max_chars)]
