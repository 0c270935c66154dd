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

__all__ = ["Block", "blocks", "sentences", "sentence_spans", "is_heading_line", "html_visible", "HTML_TAG", "HTML_TAIL"]

# A line that opens a new item: clause numbers ("1.", "8.1", "12.3.4)"), bracketed
# letters or romans ("(a)", "a)", "(iv)"), bullets, Markdown headings, "ARTICLE 5"/"Section 2".
_ITEM_START = re.compile(
    r"""^[ \t]*(?:
        \#{1,6}[ \t]                                  # Markdown heading
      | [-*\u2022\u25aa][ \t](?![^\n]*\*[ \t]*\n?$)     # bullet (not a line inside a box of asterisks)
      | \(?(?:\d{1,3}(?:\.\d{1,3}){0,4}|[a-zA-Z]|[ivxlcIVXLC]{1,6})[.)][ \t]   # 1.  8.1  a)  (iv)
      | \d{1,3}(?:\.\d{1,3}){1,4}[ \t]+(?![a-z])       # 8.1 without its closing dot (not "2.1 of this")
      | \(\s*(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,6})\s*\)[ \t]?               # (a) (12)
      | (?:ARTICLE|Article|SECTION|Section|Clause|CLAUSE|Schedule|SCHEDULE
           |Exhibit|EXHIBIT|Annex|ANNEX|Appendix|APPENDIX)\b
        (?![ \t]+\d{1,3}(?:\.\d{1,3})*[,;])   # not a cross-reference wrapped to a line ("Clause 8.1, each party")
    )""",
    re.VERBOSE,
)
# A blank line ends a paragraph; so does a line holding a lone "." (Debian copyright files and
# other RFC 822-style fields write their empty lines that way).
_BLANK = re.compile(r"\n[ \t\f\v]*\.?[ \t\f\v]*\n")
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


# A clause heading run into the line before it. Text converted from a PDF (filings as plain text) often
# joins a page's paragraphs into one line and writes each paragraph break as a run of spaces: "... this
# Section.     ARTICLE VIII  TERM AND TERMINATION     Section 8.01 Effective Date. This Agreement ...".
# Such a run opens a new line where what follows is an article ("ARTICLE VIII") or a numbered section
# with a capitalised title ("Section 8.01 Effective Date"), and what precedes it ends a sentence or a
# clause (". : ; )") or is an ALL-CAPS heading word. A wrapped line's run before a cross-reference ("as
# provided in         Section 14.3 of this Agreement") is not one: no capitalised title follows it. A bare
# clause number with a run-in title ending in a full stop ("... in the Territory.   3. Reseller Activity.
# Reseller shall ...") and a lettered item after a sentence ("... as follows:   a. Unless terminated ...")
# open one too: a PDF's page joined into one line loses the line breaks of its numbered clauses.
_RUN_IN_HEADING = re.compile(
    r"""(?:(?<=[.:;)\]"'\u201d])|(?<=[A-Z]{2}))[ \t]{3,}
        (?=(?:ARTICLE|Article)[ \t]+(?:[IVXLC]{1,6}|\d{1,3})\b
         |(?:SECTION|Section)[ \t]+\d{1,3}(?:\.\d{1,3}){0,3}\.?[ \t]+[A-Z][a-z]
         |\d{1,3}\.[ \t]+[A-Z][A-Za-z'\u2019-]*(?:,?[ \t]+(?:[A-Z][A-Za-z'\u2019-]*|and|or|of|the|on|for|to|in|&)){0,7}
          \.[ \t]
         |[a-z]\.[ \t]+(?:[A-Z][a-z]|["\u201c]))""",
    re.VERBOSE,
)


# An agreement published as the HTML of a web page ("<li><span>11.2</span>The Province may terminate ...</li>"
# on a line of its own, "<ul>" and "</li>" on lines of their own): the markup is layout. A line that opens with
# a block element starts a block, as a clause number does; a line of tags only (no visible text) separates
# blocks, as a rule line does; whether a line is a title is judged on its visible text ("<header>11.
# <u>TERMINATION</u></header>" is "11. TERMINATION"). Only HTML element names count: "<program>",
# "<name of author>" and "<https://...>" in a licence are text.
_HTML_INLINE_TAGS = "span|u|b|i|em|strong|a|small|sup|sub|font|code|br|hr|img"
_HTML_BLOCK_TAGS = ("p|li|ul|ol|dl|dt|dd|div|section|article|header|footer|h[1-6]|table|thead|tbody|tfoot|tr|td|th"
                    "|blockquote|main|nav|aside|center")
HTML_TAG = re.compile(rf"</?(?:{_HTML_BLOCK_TAGS}|{_HTML_INLINE_TAGS})\b[^<>\n]{{0,200}}?/?>", re.I)
# Closing tags after a sentence's last word ("... for the Services.</li>"): the sentence has ended.
HTML_TAIL = rf"(?:</(?:{_HTML_BLOCK_TAGS}|{_HTML_INLINE_TAGS})>[ \t]*)*"
_HTML_LINE = re.compile(rf"[ \t]*</?(?:{_HTML_BLOCK_TAGS})\b[^<>\n]{{0,200}}?/?>", re.I)


def html_visible(line: str) -> str:
    """``line`` without its HTML tags (when it opens with a block element), else ``line`` as it is."""
    return HTML_TAG.sub("", line) if _HTML_LINE.match(line) else line


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    out = []
    pos = start
    for m in _LINE.finditer(text, start, end):
        if m.start() == m.end():
            break
        ls, le = m.start(), m.end()
        for run in _RUN_IN_HEADING.finditer(text, ls, le):
            out.append((ls, run.end()))
            ls = run.end()
        out.append((ls, le))
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


_CONTINUES = frozenset(
    "the of to and or a an in for with by that which under any its is are be as at on from than "
    "this these such each all no not if".split()
)


def _heading_in_context(line: str, prev: str | None, nxt: str | None, nxt_opens: bool = False) -> bool:
    """``is_heading_line`` plus what hard-wrapped text needs: a title stands alone.

    A Title-Case line inside a wrapped paragraph ("Attribution 4.0 International Public
    License. To the") is not a heading when the line before it runs on into it, when it
    ends with a word that needs a continuation, or when the next line starts lower-case.
    """
    if not is_heading_line(line):
        return False
    s = line.strip()
    if s.startswith("#"):
        return True
    last = s.split()[-1].lower().strip("\"'(),")
    if last in _CONTINUES:
        return False
    if nxt is not None and nxt.strip()[:1].islower():
        return False
    if nxt is not None and len(s) > 55 and not (nxt_opens or _ITEM_START.match(nxt)):
        return False  # a long line whose paragraph goes on: the first line of a wrapped sentence
    if prev is not None:
        p = prev.rstrip()
        if p and p[-1] not in ".:;!?)" and len(p.strip()) > 60:
            return False  # a long line that runs on: we are its continuation
    return True


def blocks(text: str) -> list[Block]:
    """Blocks of ``text`` in order, as trimmed spans (never empty)."""
    out: list[Block] = []
    para_start = 0
    seps = [(m.start(), m.end()) for m in _BLANK.finditer(text)] + [(len(text), len(text))]
    for para_end, next_start in seps:
        lines = [(ls, le) for ls, le in _lines(text, para_start, para_end) if text[ls:le].strip()]
        cur: tuple[int, int] | None = None
        cur_heading = False
        for i, (ls, le) in enumerate(lines):
            line = text[ls:le]
            markup = _HTML_LINE.match(line) is not None
            if not any(c.isalnum() for c in (html_visible(line) if markup else line)):
                # a rule, an underline, a box border, a line of HTML tags only: ends a block
                if cur is not None:
                    s, e = _trim(text, *cur)
                    out.append(Block(s, e, cur_heading))
                cur, cur_heading = None, False
                continue
            prev = html_visible(text[slice(*lines[i - 1])]) if i else None
            nxt = html_visible(text[slice(*lines[i + 1])]) if i + 1 < len(lines) else None
            nxt_opens = i + 1 < len(lines) and _HTML_LINE.match(text[slice(*lines[i + 1])]) is not None
            heading = _heading_in_context(html_visible(line), prev, nxt, nxt_opens)
            # A new block starts at an item marker, at a heading line, after a heading line, and at a line that
            # opens with an HTML block element.
            if cur is None or heading or cur_heading or _ITEM_START.match(line) or markup:
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
        para_start = next_start
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
    """Cut a sentence longer than ``max_chars`` into about equal pieces, at ``;``/``:`` or spaces."""
    a, b = span
    if b - a <= max_chars:
        return [span]
    n = -(-(b - a) * 5 // (4 * max_chars))  # pieces of ~80% of the limit leave room to move a cut
    pieces = []
    for i in range(n - 1, 0, -1):  # i pieces remain after this cut
        target = a + (b - a) // (i + 1)
        lo = max(a + 1, target - max_chars // 5)
        hi = min(b - 1, target + max_chars // 5, a + max_chars)
        window = text[lo:hi]
        cut = max(window.rfind("; "), window.rfind(": "), window.rfind(", "))
        if cut >= 0:
            cut = lo + cut + 1
        else:
            cut = text.rfind(" ", a + 1, target + 1) if " " in text[a + 1:target + 1] else target
        pieces.append(_trim(text, a, cut))
        a = _trim(text, cut, b)[0]
    pieces.append((a, b))
    return [p for p in pieces if p[1] > p[0]]


def sentences(text: str, max_chars: int = 600) -> list[tuple[int, int]]:
    """All sentences of ``text`` in order: blocks first, then sentences inside each block.

    A heading block is one sentence whatever its punctuation.
    """
    out: list[tuple[int, int]] = []
    for blk in blocks(text):
        if blk.heading:  # a title is one unit: "ARTICLE 12. GOVERNING LAW" is not two sentences
            out.append((blk.start, blk.end))
        else:
            out.extend(sentence_spans(text, blk.start, blk.end, max_chars))
    return out
