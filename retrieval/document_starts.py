"""Where an agreement of a case file opens: preamble sentences, click-through paragraphs and titles.

:func:`opens` says whether a block opens a document (:mod:`.documents` walks the openings found into
document spans); :func:`attached` whether the title lines of an opening carry the label of an attachment
that the document before it names (an exhibit of that agreement, not a new document).
"""

from __future__ import annotations

import re

from .document_evidence import evidence_opens
from .document_titles import INSTRUMENT as _INSTRUMENT
from .document_titles import LEGAL_WORDS, drafting_block, is_title, restarts_numbering
from .document_titles import NUMBERED as _NUMBERED
from .sentences import html_visible

__all__ = ["OPENING", "opening_sentence", "MIN_DOCUMENT_CHARS", "MIN_TITLED_CHARS", "opens", "attached", "legal_block"]

# An agreement's opening sentence: "This [Title] Agreement / Amendment / ... [("Agreement")] is
# made / entered into [as of / on DATE] [by and] between". Up to ~12 title words and a short
# parenthetical; the verb within 300 characters of "This".
OPENING = re.compile(
    rf"^\W{{0,3}}(?:this|the)\s+(?:[\w&'\u2019,.-]+\s+){{0,12}}?{_INSTRUMENT}\b(?:\s+No\.\s*\d+)?[^.;]{{0,300}}?"
    r"\b(?:is|are|was|has\s+been)\s+(?:hereby\s+)?(?:(?:made|entered\s+into|executed|concluded|dated)\b"
    r"[^.;]{0,300}?)?\b(?:by\s+and\s+)?(?:between|among(?:st)?)\b", re.I)
# The same sentence with its parties set out in the next block ("This Agreement is dated 1 May 2025" over
# "BETWEEN:" or "PARTIES", English drafting; "... is entered into as of DATE" over "BY AND AMONG:").
_OPENING_DATED = re.compile(
    rf"^\W{{0,3}}(?:this|the)\s+(?:[\w&'\u2019,.-]+\s+){{0,12}}?{_INSTRUMENT}\b(?:\s+No\.\s*\d+)?[^.;]{{0,300}}?"
    r"\b(?:is|are|was|has\s+been)\s+(?:hereby\s+)?(?:made|entered\s+into|executed|concluded|dated)\b[^;]{0,200}$",
    re.I)
_PARTIES_NEXT = re.compile(r"^\W{0,3}(?:(?:by\s+and\s+)?(?:between|among(?:st)?)\b|parties\b)", re.I)
# An untitled click-through opening: a paragraph that tells the reader how the instrument is accepted
# ("PLEASE READ THESE TERMS CAREFULLY ... BY CLICKING "I AGREE" ... YOU ACCEPT ... THIS EVALUATION
# AGREEMENT"), in its first sentences, naming the instrument. Terms of service restate acceptance in
# their body too, so it opens a document only when the numbering starts again at 1 after it.
# A preamble that lists the parties: "The parties to this (these) "... Agreement" (the "Agreement") are A and B"
# (Commonwealth government drafting).
_PARTIES_ARE = re.compile(rf"^\W{{0,3}}the\s+parties\s+to\s+(?:this|these)\s+\W{{0,2}}(?:[\w&'\u2019,.-]+\s+){{0,12}}?"
                          rf"{_INSTRUMENT}\b[^.;]{{0,200}}?\bare\b", re.I)
# An untitled opening that says what the instrument governs: "These terms govern use of the website ...", "This
# Agreement applies to ...". Instruments say so of themselves inside too, so it opens a document only after text
# that is no drafting (see _after_other_text), where a reader sees a new instrument begin.
_GOVERNS = re.compile(rf"\W{{0,3}}(?:this|these)\s+(?:[\w'\u2019-]+\s+){{0,6}}?(?:{_INSTRUMENT}|conditions)"
                      r"(?:\s+of\s+(?:service|use|sale))?\s+(?:govern|apply\s+to|applies\s+to)", re.I)
_OTHER_CHARS = 1000
# "Effective DATE, A ("Consultant") and B agree as follows:": the parties, one defined in brackets, agreeing to
# what follows; not the operative words after recitals ("NOW, THEREFORE, ... the parties agree as follows").
_AGREE_AS_FOLLOWS = re.compile(r"^(?![^.;]{0,500}\b(?:therefore|whereas|premises|witnesseth)\b)[^.;]{0,250}?"
                               r"\([^()]{0,20}[\u201c\"][^()]{1,60}\)[^.;]{0,250}?\bagree\s+as\s+follows\b", re.I)
# A title in capitals run into the preamble on its line, as a filing's text often has it.
_RUN_IN_TITLE = re.compile(r"^\W{0,3}(?:[A-Z][A-Z0-9&'\u2019,.-]*[ \t]+){0,8}?(?:AGREEMENT|CONTRACT|LICEN[CS]E|LEASE|"
                           r"DEED|AMENDMENT|ADDENDUM)[ \t]+(?=(?:THIS|This|THE|The)\b)")
_ACCEPTANCE = re.compile(r"\b(?:please\s+read\s+(?:(?:this|these|the\s+following)\b"
                         r"(?!\s+(?:section|clause|paragraph|provision|article|part)s?\b)|carefully\b)|by\s+(?:clicking|"
                         r"accessing|using|downloading|installing|signing\s+up|registering|checking)\b[^.]{0,200}?"
                         r"\byou\s+(?:(?:hereby|expressly)\s+)?(?:accept|agree|consent)\b)", re.I)
_ACCEPTANCE_NAMES = re.compile(rf"\b(?:this|these)\s+(?:[\w'\u2019-]+\s+){{0,4}}?{_INSTRUMENT}\b", re.I)
_ACCEPTANCE_CHARS = 400  # the acceptance sentence begins this close to the paragraph's start
# Without a close in between, two starts this far apart are two documents: an opening sentence
# alone may be a restated preamble; a title confirmed by what follows it is stronger evidence.
MIN_DOCUMENT_CHARS = 6000
MIN_TITLED_CHARS = 200
# An attachment's label on a title line ("EXHIBIT B", "Schedule 2 - Order Form", "Annex I"); not an SEC
# filing's exhibit number ("Exhibit 10.1"), which heads an agreement filed whole.
_ATTACHMENT = re.compile(r"(?im)^[^\w\n]{0,6}(?:exhibit|schedule|annex|appendix|attachment)\s+(?:[A-Z]|\d+|[IVXL]+)\b"
                         r"(?!\.\d)")

def opening_sentence(text: str, b) -> bool:
    """Whether block ``b`` begins with an agreement's preamble sentence (``OPENING``, ``_PARTIES_ARE``), read on
    its visible text when it is HTML ("<p>The parties to this ...")."""
    head = html_visible(text[b.start:min(b.end, b.start + 900)])
    if m := _RUN_IN_TITLE.match(head):
        head = head[m.end():]  # "OUTSOURCING AGREEMENT     This Outsourcing Agreement is entered into ..."
    return any(p.match(head) is not None for p in (OPENING, _PARTIES_ARE, _AGREE_AS_FOLLOWS))


def opens(text: str, bl, k: int) -> bool:
    """Whether block ``k`` opens a document: an agreement's preamble sentence, or a title line
    naming an instrument after which the numbering starts again at 1 (see :func:`is_title`), or
    an untitled "These terms govern ..." paragraph after text that is no drafting (``_GOVERNS``), or a block
    whose evidence passes :func:`.document_evidence.evidence_opens` (title, preamble, what precedes and follows)."""
    b = bl[k]
    if not b.heading and opening_sentence(text, b):
        return True
    if not b.heading and _GOVERNS.match(text, b.start, b.end) and _after_other_text(text, bl, k):
        return True
    if (not b.heading and k + 1 < len(bl) and _OPENING_DATED.match(text[b.start:min(b.end, b.start + 600)])
            and _PARTIES_NEXT.match(text[bl[k + 1].start:bl[k + 1].end])):
        return True  # "This Agreement is dated ..." with "BETWEEN:" / "PARTIES" below it
    return is_title(text, bl, k) or _is_acceptance(text, bl, k) or evidence_opens(text, bl, k)


def _after_other_text(text: str, bl, k: int) -> bool:
    """Whether the ``_OTHER_CHARS`` before block ``k`` hold text, none of it drafting: no word of legal
    drafting (``LEGAL_WORDS``) and no numbered clause."""
    window = [b for b in bl[:k] if b.end > bl[k].start - _OTHER_CHARS]
    return (sum(b.end - b.start for b in window) >= _OTHER_CHARS // 4
            and not any(drafting_block(text, b) for b in window))


def _is_acceptance(text: str, bl, k: int) -> bool:
    """Whether block ``k`` is an untitled click-through opening (see ``_ACCEPTANCE``) that the
    numbering restarting at 1 after it confirms."""
    b = bl[k]
    if b.heading or _NUMBERED.match(text, b.start):
        return False  # a clause of an agreement ("2. Acceptance. By using ..."), not its opening
    head = text[b.start:min(b.end, b.start + _ACCEPTANCE_CHARS)]
    return (_ACCEPTANCE.search(head) is not None and _ACCEPTANCE_NAMES.search(text, b.start, b.end) is not None
            and restarts_numbering(text, b.end))


def attached(text: str, previous: int, start: int, end: int) -> bool:
    """Whether the title lines ``text[start:end]`` carry an attachment's label that the document
    beginning at ``previous`` names ("the Services described in Exhibit B"): an exhibit of that
    agreement, not a new document. A licence filed as "EXHIBIT 1" that nothing before names is one."""
    label = _ATTACHMENT.search(text, start, end)
    if label is None:
        return False
    word, ident = label.group(0).split()[-2:]
    word = re.sub(r"^\W+", "", word)
    return re.search(rf"\b{word}\s+{re.escape(ident)}\b", text[previous:start], re.I) is not None


def legal_block(text: str, bl, start: int, end: int) -> bool:
    """Whether a block in ``[start, end)`` has two distinct words of legal drafting (``LEGAL_WORDS``), so reads as
    part of an instrument. Text before the first document with none, longer than ``documents._LEAD_CHARS`` (a
    cover letter, technical material filed ahead), is "other", not reviewed. Text after a document stays with it:
    an instrument's last pages (an appendix, a notice form) often read as plain prose."""
    for b in bl:
        if b.start >= end:
            return False
        if b.start >= start and len({m.group(0).lower() for m in LEGAL_WORDS.finditer(text, b.start, b.end)}) >= 2:
            return True
    return False

