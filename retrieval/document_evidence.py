"""Where an agreement starts, scored from evidence that any drafter's agreement shows, not from one drafter's phrases.

:mod:`.document_starts` finds openings by exact rules (a preamble sentence, a confirmed title, a click-through
paragraph). Agreements of other drafters open in other words, so :func:`evidence_opens` adds a score over general
signs, each weak alone:

* **the opening itself** (at least one is needed): a short title line naming an instrument ("JOINT FILING
  AGREEMENT", a front matter ``title:`` naming one, a capitals title run into its preamble "EXHIBIT 4.1 CONSULTING
  AGREEMENT THIS AGREEMENT ...", or after a legend in its paragraph), a preamble within ``PREAMBLE_CHARS`` after
  it ("by and between", "BETWEEN:", "is made", "made and entered into", "is a legal agreement between", "the
  undersigned hereby agree", "Welcome to", "These are the terms for"), or title lines that name two parties joined
  by a lone "and" (a cover block); untitled, a clause "1." whose first paragraphs define the instrument;
* **what comes before**: the end of another instrument (a signature block, "IN WITNESS WHEREOF") or text without
  legal voice, however short the stretch after the drafting above it; drafting right before with no close between
  counts against (a heading inside an agreement);
* **what comes after**: the clause numbering starting at 1.

A block opens a document when its opening evidence and the score pass ``THRESHOLD``. :func:`label_above` moves a
start up over what heads a document above its title: a front matter's "---" line, a version line ("v. 2019-11-23")
and a filing's exhibit label with the letterhead lines between it and the title. Used by :mod:`.document_starts`
and :mod:`.documents`.
"""

from __future__ import annotations

import re

from .document_titles import CLOSE, LEGAL_WORDS, NUMBERED, SIGNATURE, drafting_block, restarts_numbering
from .sentences import html_visible

__all__ = ["evidence_opens", "evidence_score", "label_above", "THRESHOLD", "PREAMBLE_CHARS"]

# The nouns that name an instrument, as a title names it.
_NOUN = (r"(?:agreement|contract|terms|conditions|licen[cs]e|lease|deed|addendum|amendment|nda|memorandum|"
         r"statement\s+of\s+work|order\s+form|undertaking|indenture|guarant(?:y|ee)|note)")
# A title line: unnumbered, no sentence in it, the noun among its words; not a clause heading that refers to its
# instrument ("Term of this Agreement", "Scope of the Agreement") nor one that only mentions terms ("Payment Terms" is
# told apart by the rest of the evidence, not here).
_TITLE_LINE = re.compile(rf"^[^\w\n]{{0,4}}(?!\d)(?:[\w&'\u2019().,/-]+[ \t]+){{0,9}}?{_NOUN}s?\b[^\n.;:]{{0,60}}$",
                         re.I)
_REFERS = re.compile(r"\b(?:(?:this|these|such)\s+|(?:of|under)\s+the\s+)(?:[\w'\u2019-]+\s+){0,2}?"
                     r"(?:agreement|terms|contract|licen[cs]e|amendment|addendum)\b", re.I)
# A heading that names no instrument of its own: "TERMS AND CONDITIONS (FOR USE, ...)", "General Terms" head the
# operative part of a licence or a part of an agreement; "Terms of Service" names one.
_GENERIC = re.compile(r"^\W{0,3}(?:the\s+)?(?:(?:general|standard|additional|special|other)\s+)?(?:terms|conditions)"
                      r"(?:\s+(?:and|&)\s+conditions)?(?!\s+of\b)\b", re.I)
_MARKER = re.compile(r"^\W{0,3}(?:\(?[A-Za-z]{1,2}[.)]|\(?[ivxlcIVXLC]{1,5}[.)]|(?:part|section|article|clause|chapter|"
                     r"schedule|annex|appendix)\s+[\dA-Z]{1,4}\b)\s", re.I)
# A front matter block naming the instrument: "---\ntitle: GitHub Research Program Terms" (YAML), '+++\ntitle = "..."'.
_FRONT_TITLE = re.compile(rf"(?:---|\+\+\+)[ \t]*\n(?:[^\n]*\n){{0,12}}?[ \t]*title[ \t]*[:=][^\n]*{_NOUN}", re.I)
# A capitals title run into the preamble at a block's start, after an exhibit label: "EXHIBIT 4.1 CONSULTING AGREEMENT
# THIS AGREEMENT is dated ...".
_RUN_IN = re.compile(r"^\W{0,3}(?:EXHIBIT\s+[\d.A-Z]+\s+)?(?:[A-Z][A-Z&'\u2019,-]*\s+){0,6}?"
                     r"(?:AGREEMENT|CONTRACT|LICEN[CS]E|LEASE|DEED|ADDENDUM|AMENDMENT|TERMS|NOTE)\s+(?:THIS|This)\b")
# A title run into its preamble after a legend in the same paragraph: "... if publicly disclosed. Amendment #3 to the
# Manufacturing Agreement This Amendment #3 ..." (a filing's confidential-treatment legend); the title and the preamble
# after it name the same instrument.
_LEGEND_RUN_IN = re.compile(rf"[.)\]]\s+(?P<title>[A-Z][\w&'\u2019-]*\s+(?:(?:[A-Z#][\w&'\u2019#,-]*|to|of|and|the|"
                            rf"for)\s+){{0,8}}?(?P<noun>(?i:{_NOUN})))\s+(?:THIS|This)\s+(?:[\w&'\u2019#-]+\s+){{0,8}}?"
                            r"(?P=noun)\b")
_LEGEND_CHARS = 700  # the run-in title begins this close to the paragraph's start
# A preamble's words, near a title: the instrument made between parties, the undersigned agreeing, a click-through's
# welcome. Each is said inside agreements too; here they count only with a title or after a close or other text.
_PREAMBLE = re.compile(
    r"\bby\s+and\s+(?:between|among)\b|^\W{0,3}parties\s*:|\b(?:between|among)\s*:|"
    rf"\b(?:this|these)\s+(?:[\w&'\u2019-]+\s+){{0,8}}?{_NOUN}\b[^.;]{{0,200}}?(?:\b(?:is|are|was)\s+(?:hereby\s+)?"
    rf"(?:made|entered\s+into|dated|executed|concluded|an?\s+(?:legal\s+|binding\s+)?(?:agreement|contract)\b)|"
    r"\bmade\s+and\s+entered\s+into\b)|"
    r"\bthe\s+undersigned\b[^.;]{0,80}?\b(?:hereby\s+)?agree|"
    r"^\W{0,3}welcome\s+to\b|"
    rf"^\W{{0,3}}(?:this|these)\s+(?:is|are)\s+the\s+(?:[\w-]+\s+){{0,3}}?{_NOUN}\b",
    re.I | re.M)
# An instrument defined in its first paragraphs: "these terms and conditions (the "Agreement")", "(the "Terms")".
_DEFINES = re.compile(r"\((?:the|this|these)?\s*[\u201c\"](?:agreement|contract|terms(?:\s+of\s+(?:use|service))?|"
                      r"terms\s+and\s+conditions)[\u201d\"]\)", re.I)
# Title lines that name the parties, a lone "and" between them (a cover block: "GSA / and / Agency").
_AND_LINE = re.compile(r"^[\W_]*(?:and|between|by\s+and\s+between)[\W_]*$", re.I)
PREAMBLE_CHARS = 800
_BEFORE_CHARS = 2000  # the text before a start read for its voice: a stretch, not the clause above
_CLOSE_CHARS = 1500  # a signature block this close before a start ends the instrument before it
THRESHOLD = 5
_OPENING_MIN = 2


def _visible(text: str, b) -> str:
    return " ".join(html_visible(text[b.start:b.end]).split())


def _title_line(text: str, b) -> bool:
    line = _visible(text, b)
    if len(line) > 120 or "\n" in text[b.start:b.end].strip() and not b.heading:
        return False
    line = re.sub(r"^\#{1,6}\s+|[*_]{1,3}", "", line).strip()
    if not line or _REFERS.search(line) or NUMBERED.match(line) or _MARKER.match(line) or _GENERIC.match(line):
        return False  # a clause heading: it refers to its instrument, is numbered or lettered ("E. Services Terms")
    words = [w for w in re.findall(r"[A-Za-z][\w'\u2019-]*", line) if len(w) > 3]
    capitalised = sum(w[0].isupper() for w in words)
    return _TITLE_LINE.match(line) is not None and capitalised >= max(1, len(words) * 0.6)


def _opening(text: str, bl, k: int) -> int:
    """Opening evidence of block ``k``: 2 for a title (a title line, a front matter title, a run-in title) or a
    cover block of parties, 2 more for a preamble within ``PREAMBLE_CHARS``."""
    b = bl[k]
    head = text[b.start:min(b.end, b.start + 400)]
    titled = (_title_line(text, b) or _front_title(text, b.start)
              or _RUN_IN.match(head) is not None or _parties_cover(text, bl, k) or _legend_title(text, b))
    window = text[b.start:b.start + PREAMBLE_CHARS]
    preamble = _PREAMBLE.search(html_visible(window)) is not None
    if not titled and not (preamble and _PREAMBLE.match(html_visible(head)) is not None):
        return 0  # untitled: only a paragraph that is itself the preamble opens
    return 2 * titled + 2 * preamble


def _legend_title(text: str, b) -> bool:
    """Whether a title runs into its preamble after the first sentences of block ``b`` (see ``_LEGEND_RUN_IN``),
    not a clause heading that refers to its instrument ("Term of the Agreement This Agreement ...")."""
    m = _LEGEND_RUN_IN.search(html_visible(text[b.start:min(b.end, b.start + _LEGEND_CHARS + 200)]))
    return m is not None and m.start() < _LEGEND_CHARS and _REFERS.search(m["title"]) is None


def _front_title(text: str, at: int) -> bool:
    """Whether a front matter block that names the instrument in its ``title`` opens at ``at`` (its "---" line, a
    rule and no block of its own, right above)."""
    m = _FRONT_TITLE.match(text, max(0, text.rfind("\n", 0, max(0, at - 1)) + 1) if at else 0)
    return m is not None and m.end() > at


def _parties_cover(text: str, bl, k: int) -> bool:
    """Whether block ``k`` begins a run of heading lines, one of them a lone "and" between two names."""
    run = []
    for b in bl[k:k + 6]:
        if not b.heading:
            break
        run.append(_visible(text, b))
    return any(_AND_LINE.match(re.sub(r"^\#{1,6}\s+", "", line)) for line in run[1:-1])


# What a title repeated over a signature page or an exhibit has right below it; a longer block is no such title.
_TITLE_CHARS = 200
_BELOW_TITLE = re.compile(r"^\W{0,6}(?:in\s+witness\s+whereof|(?:exhibit|schedule|annex|appendix|attachment)\s+"
                          r"(?:[A-Z]|\d+|[IVXL]+)\b(?!\.\d)|signature\s+page)", re.I)


def _heads_attachment(text: str, bl, k: int) -> bool:
    """Whether the block after title block ``k`` opens a signature page or an attachment ("IN WITNESS WHEREOF",
    "EXHIBIT A"): the instrument's title repeated over its own last pages, not a new instrument."""
    return (k + 1 < len(bl) and bl[k + 1].start - bl[k].end <= 300 and bl[k].end - bl[k].start <= _TITLE_CHARS
            and _BELOW_TITLE.match(re.sub(r"^[#>*_\s]+", "", html_visible(text[bl[k + 1].start:bl[k + 1].end])))
            is not None)


def _legal_hits(text: str, start: int, end: int) -> int:
    return sum(1 for _ in LEGAL_WORDS.finditer(text, start, end))


def _closed_before(text: str, at: int) -> bool:
    """Whether a signature block or "IN WITNESS WHEREOF" ends the ``_CLOSE_CHARS`` before ``at``."""
    window = text[max(0, at - _CLOSE_CHARS):at]
    return (CLOSE.search(window) is not None or re.search(r"\[Signature\s+Page(?!s?\s+Follows?)", window) is not None
            or sum(1 for line in window.splitlines() if SIGNATURE.match(line)) >= 2)


def _before(text: str, bl, k: int) -> int:
    """What precedes block ``k``: +2 for a close, or for text with no legal voice before it: at least
    ``_BEFORE_CHARS // 4`` characters in the ``_BEFORE_CHARS`` before it with at most one word of legal drafting, or
    that many characters of paragraphs right before it none of which is drafting (notes between two instruments
    may be short); -3 for drafting right before with no close; else 0."""
    at = bl[k].start
    if _closed_before(text, at):
        return 2
    start = max(0, at - _BEFORE_CHARS)
    hits = _legal_hits(text, start, at)
    quiet = 0  # the paragraphs right before the block, back to the first that is drafting
    for b in reversed(bl[:k]):
        if b.start < start or drafting_block(text, b):
            break
        quiet = at - b.start
    if quiet >= _BEFORE_CHARS // 4 or at - start >= _BEFORE_CHARS // 4 and hits <= 1:
        return 2  # text with no legal voice before: a cover letter, notes, another kind of text
    return -3 if hits >= 3 else 0  # drafting right before and no close: a heading or a recital inside


def _numbered_opening(text: str, bl, k: int, number: str) -> int:
    """The score of an untitled document that opens at its clause "1.": its first paragraphs define the instrument
    ("these terms and conditions (the "Agreement")") and other text or a close precedes; else 0."""
    start = bl[k].start
    if number != "1" or not _DEFINES.search(html_visible(text[start:start + PREAMBLE_CHARS])):
        return 0
    before = _before(text, bl, k)
    return 2 + before + 1 if before > 0 else 0  # the definition, what precedes, the numbering at 1


def evidence_score(text: str, bl, k: int) -> int:
    """The score of block ``k`` as a document's first block (see the module docstring); 0 without an opening."""
    b = bl[k]
    if _heads_attachment(text, bl, k):
        return 0  # a signature page's or an exhibit's title
    if (numbered := NUMBERED.match(text, b.start)) is not None:
        return _numbered_opening(text, bl, k, numbered["n"])  # a clause ("1. License Agreement": the title rules)
    opening = _opening(text, bl, k)
    if opening < _OPENING_MIN:
        return 0
    score = opening + _before(text, bl, k)
    if restarts_numbering(text, b.end):
        score += 1
    return score


def evidence_opens(text: str, bl, k: int) -> bool:
    """Whether block ``k`` opens a document on the evidence score (see the module docstring)."""
    return evidence_score(text, bl, k) >= THRESHOLD


# A filing's exhibit label on its own line ("Exhibit 10.3", "EXHIBIT 99.1"), a page number before it allowed.
_EXHIBIT_LABEL = re.compile(r"(?im)^[ \t]*(?:\d{1,3}[ \t]+)?exhibit[ \t]+\d{1,3}(?:\.\d{1,3})?[A-Z]?[ \t]*$")
_LABEL_CHARS = 400


# A version or date line at the head of a document ("v. 2019-11-23", "Version 3.1", "Last updated: May 2025").
_VERSION = re.compile(r"^\W{0,3}(?:v(?:ersion)?\.?\s*\d|(?:last\s+)?(?:updated|revised|modified)\s*(?:on\s*)?[:\d])",
                      re.I)
_URL = re.compile(r"\(?https?://\S+")
_HEAD_LINES = 3  # short paragraphs above a title read for a version line
_HEAD_LINE_CHARS = 150


def _version_above(text: str, start: int) -> int:
    """``start`` moved up to a version or date line among the ``_HEAD_LINES`` short paragraphs right above it (a form
    link may stand between), none of them drafting; else ``start``."""
    at, found = start, start
    for _ in range(_HEAD_LINES):
        end = text.rfind("\n\n", 0, at)
        if end < 0:
            break
        para_start = text.rfind("\n\n", 0, end) + 2 if text.rfind("\n\n", 0, end) >= 0 else 0
        para = text[para_start:end].strip()
        if (not para or len(_URL.sub("", para)) > _HEAD_LINE_CHARS or "\n" in para
                or LEGAL_WORDS.search(_URL.sub("", para))):
            break  # a link's address is no drafting ("/forms/speaker-agreement/")
        at = para_start
        if _VERSION.match(para):
            found = para_start
    return found


def label_above(text: str, start: int) -> int:
    """``start`` moved up over what heads the document above its first block: the "---" / "+++" line that opens
    its front matter, a version line (see ``_version_above``), and a filing's exhibit label within ``_LABEL_CHARS``
    above, with the short lines between (a letterhead) when none of them is drafting; else ``start``."""
    above = text.rfind("\n", 0, max(0, start - 1)) + 1
    if start and text[above:start].strip() in ("---", "+++"):
        start = above  # the front matter's opening line: a rule, no block of its own
    start = _version_above(text, start)
    labels = list(_EXHIBIT_LABEL.finditer(text, max(0, start - _LABEL_CHARS), start))
    if not labels:
        return start
    between = text[labels[-1].end():start]
    if _legal_hits(text, labels[-1].end(), start) or any(len(line) > 200 for line in between.splitlines()):
        return start
    return labels[-1].start()
