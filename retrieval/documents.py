"""The documents inside one text: a case file holds several agreements, amendments and exhibits.

A user loads a case file as one context (one prefill, one KV store entry) but a lawyer reviews
each agreement apart. :func:`split_documents` finds where each document starts, from two kinds
of evidence, both plain text:

* **file headers**: texts joined by :func:`join_documents` (``agentctx review a.txt b.txt``, an
  upload of several files) carry one header line per document, ``=== Document 2: msa.txt ===``.
  They are exact, so when present they alone decide.
* **agreement openings**: a preamble sentence that makes an agreement ("This Master Services
  Agreement (the "Agreement") is entered into ... by and between ...", "THIS AMENDMENT is made
  ... between"), at the start of a paragraph, with the title lines just above it ("CLOUD SERVICE
  AGREEMENT"). A second opening after the first starts a new document when the text between
  them holds a close (a signature block, "IN WITNESS WHEREOF") or is long enough to be a whole
  agreement, so a recital that restates the parties does not split an agreement in two. Also a
  Markdown or HTML title ("# Widget Hosting Agreement", "<h1>Account Agreement</h1>") whose
  numbering ("**1.**", "### 1.") starts again, and an untitled click-through paragraph ("PLEASE READ
  THESE TERMS ... BY CLICKING ... YOU ACCEPT ... THIS EVALUATION AGREEMENT") with numbering after it.
  A line that refers to its instrument ("Interpreting these Use Terms"), a heading over "NOW, THEREFORE"
  and an execution line ("Signed as a deed") are no titles; comments, front matter and a covering letter
  right above a title belong to its document.

Exhibits and schedules stay with the agreement they follow when it names them ("Exhibit B")
unless they open with a preamble of their own. A text with no evidence of several documents is
one document. Everything is a character span of the original text; the spans tile the text.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, replace

from .sentences import blocks, html_visible
from .structure import DocumentStructure, parse_structure, structure_of

__all__ = ["DocumentPart", "split_documents", "join_documents", "document_header", "documents_of",
           "document_structure"]

_HEADER = re.compile(r"(?m)^=== Document (?P<n>\d+): (?P<name>[^\n]{1,200}?) ===[ \t]*$")
# An agreement's opening sentence: "This [Title] Agreement / Amendment / ... [("Agreement")] is
# made / entered into [as of / on DATE] [by and] between". Up to ~12 title words and a short
# parenthetical; the verb within 300 characters of "This".
_INSTRUMENT = (r"(?:agreement|contract|amendment|addendum|terms|license|licence|lease|deed|memorandum|"
               r"understanding|order\s+form|statement\s+of\s+work|sow|note|indenture|guaranty|guarantee)")
_OPENING = re.compile(
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
# A title line that names an instrument ("Cloud Service Agreement", "SOFTWARE LICENSE AGREEMENT
# (Version 2)", "Amendment No. 1 to the Master Services Agreement", "Standard Terms"): unnumbered,
# the instrument's word among its last words. Alone it may be an unnumbered heading inside an
# agreement ("Payment Terms"), so it starts a document only when the numbering restarts after it.
_TITLE_INSTRUMENT = (r"(?:agreement|contract|amendment|addendum|license|licence|lease|deed|nda|memorandum\s+of\s+"
                     r"understanding|order\s+form|statement\s+of\s+work|(?:standard|general|master|platform|cloud|"
                     r"online|services?|user|use|website|subscription)\s+terms|terms\s+(?:and\s+conditions|"
                     r"of\s+(?:service|use|sale|business|engagement))|(?:convertible\s+)?promissory\s+note|"
                     r"convertible\s+note)")
# The instrument's word ends the title, or is followed only by a version, a parenthetical or a
# "for ..." / "to ..." / "- ..." tail, or a second instrument joined to it ("Agreement and Release"): "License
# Agreement for NVIDIA SDKs", "Public License v. 1.2";
# not "License Grant", a section heading.
_TITLE = re.compile(rf"^(?:\#{{1,6}}[ \t]+)?[^\w\n]{{0,3}}(?:1\.[ \t]+)?"
                    rf"(?![\d(]|end\b|(?:article|section|clause|chapter|part)\s+\w|(?:signed|executed|delivered)\b)"
                    rf"(?:[\w&'\u2019\u201c\u201d\x22,.-]+\s+){{0,10}}?{_TITLE_INSTRUMENT}"
                    r"(?:\s*(?:v\.?|version)\s*[\d.]+|\s*\([^)]{0,60}\)|\s+(?:for|to|of|between)\s+.{0,80}|"
                    r"\s*[-\u2013\u2014:]\s+.{0,80}|\s+(?:&|and)\s+(?:[\w-]+\s+){0,3}?(?:release|waiver|consent|plan\s+of\s+\w+))?"
                    r"\W*$", re.I)
# Markdown marks before the number count as layout: "### 1. Term", "**1.\tThe Agreement**.".
_NUMBERED = re.compile(r"(?m)^[ \t]*(?:\#{1,6}[ \t]+)?[*_]{0,3}"
                       r"(?:(?:ARTICLE|Article|SECTION|Section|CLAUSE|Clause)\s+)?(?P<n>\d+|[IVX]+)"
                       r"(?:\.\d+)*[.):]?[*_]{0,3}[ \t]+\S")
_RESTART_WINDOW = 4000  # the first numbered line after a title, looked for this far
# How an instrument's own text begins: it names itself ("This Agreement is ...", "This European Union
# Public Licence applies ..."), states how it is accepted ("By downloading ..."), or opens a preamble.
_SELF_START = re.compile(r"^\W{0,3}(?:(?:this|these)\s+(?:[\w'\u2019-]+\s+){0,8}?(?:agreement|licen[cs]e|terms|"
                         r"amendment|addendum|contract)\b|by\s+(?:downloading|installing|using|accessing|exercising|"
                         r"clicking|signing|executing)\b|i\s+(?:hereby\s+)?(?:accept|agree)\b|preamble\b|version\s+\d|(?:important\s+)?notice\b|(?:please\s+)?read\s+"
                         r"(?:this|the\s+following|carefully|before)\b)", re.I)
_SELF_WINDOW = 1500
# An untitled click-through opening: a paragraph that tells the reader how the instrument is accepted
# ("PLEASE READ THESE TERMS CAREFULLY ... BY CLICKING "I AGREE" ... YOU ACCEPT ... THIS EVALUATION
# AGREEMENT"), in its first sentences, naming the instrument. Terms of service restate acceptance in
# their body too, so it opens a document only when the numbering starts again at 1 after it.
_ACCEPTANCE = re.compile(r"\b(?:please\s+read\s+(?:(?:this|these|the\s+following)\b"
                         r"(?!\s+(?:section|clause|paragraph|provision|article|part)s?\b)|carefully\b)|by\s+(?:clicking|"
                         r"accessing|using|downloading|installing|signing\s+up|registering|checking)\b[^.]{0,200}?"
                         r"\byou\s+(?:(?:hereby|expressly)\s+)?(?:accept|agree|consent)\b)", re.I)
_ACCEPTANCE_NAMES = re.compile(rf"\b(?:this|these)\s+(?:[\w'\u2019-]+\s+){{0,4}}?{_INSTRUMENT}\b", re.I)
_ACCEPTANCE_CHARS = 400  # the acceptance sentence begins this close to the paragraph's start
_SIGNATURE = re.compile(r"^\s*(?:By|Name|Title|Date|Its|Signature|Signed)\s*:", re.I)
_CLOSE = re.compile(r"\bIN\s+WITNESS\s+WHEREOF\b|\bEND\s+OF\s+TERMS\s+AND\s+CONDITIONS\b"
                    r"|^\s*(?:By|Signature|Signed)\s*:\s*_{3,}|^\s*By\s*:\s*$"
                    r"|\bexecuted\s+(?:this\s+)?(?:Agreement|Amendment)\s+as\s+of\b", re.I | re.M)
_TITLE_WORDS = re.compile(rf"\b{_INSTRUMENT}\b|\bnda\b|\bexhibit\b|\bschedule\b|\bannex\b", re.I)
# Without a close in between, two starts this far apart are two documents: an opening sentence
# alone may be a restated preamble; a title confirmed by what follows it is stronger evidence.
MIN_DOCUMENT_CHARS = 6000
MIN_TITLED_CHARS = 200
# An attachment's label on a title line ("EXHIBIT B", "Schedule 2 - Order Form", "Annex I"); not an SEC
# filing's exhibit number ("Exhibit 10.1"), which heads an agreement filed whole.
_ATTACHMENT = re.compile(r"(?im)^[^\w\n]{0,6}(?:exhibit|schedule|annex|appendix|attachment)\s+(?:[A-Z]|\d+|[IVXL]+)\b"
                         r"(?!\.\d)")
_TITLE_LOOKBACK = 3  # title blocks above an opening that belong to its document
_TITLE_GAP = 600  # characters between a title block and the opening


# Words of legal drafting; a block with two of them reads as part of an instrument. Text before
# the first document that has none and is longer than ``_LEAD_CHARS`` (a cover letter, technical
# material filed ahead) is "other", not reviewed. Text after a document stays with it: an
# instrument's last pages (an appendix, a notice form) often read as plain prose.
_LEGAL_WORDS = re.compile(r"\b(?:shall|hereby|herein|hereunder|hereto|hereof|thereof|whereas|licens(?:or|ee)s?|"
                          r"agreements?|part(?:y|ies)|warrant(?:y|ies)|liab(?:le|ility)|indemni\w*|governed|"
                          r"jurisdiction|breach|pursuant|notwithstanding)\b", re.I)
_LEAD_CHARS = 1500


@dataclass(frozen=True, slots=True)
class DocumentPart:
    """One document of a text: ``text[start:end]``, named as a reader names it.

    ``how``: "header" (a file header of :func:`join_documents`), "opening" (an agreement's
    preamble and its title), "whole" (the text is one document) or "other" (text between
    documents that does not read as an instrument: not reviewed)."""

    index: int
    name: str
    start: int
    end: int
    how: str

    def holds(self, offset: int) -> bool:
        return self.start <= offset < self.end

    @property
    def reviewed(self) -> bool:
        return self.how != "other"


def document_header(n: int, name: str) -> str:
    """The header line that starts document ``n`` (1-based) of a joined text."""
    clean = " ".join(name.split()) or f"document {n}"
    return f"=== Document {n}: {clean[:200]} ==="


def join_documents(named: list[tuple[str, str]]) -> str:
    """One text of several ``(name, text)`` documents, each after its header line; the header
    tells :func:`split_documents` (and the model, and a reader of a citation) where each begins."""
    if not named:
        raise ValueError("join_documents needs at least one document")
    parts = [f"{document_header(i + 1, name)}\n\n{text.strip()}\n" for i, (name, text) in enumerate(named)]
    return "\n\n".join(parts)


def _from_headers(text: str) -> list[DocumentPart] | None:
    heads = list(_HEADER.finditer(text))
    if not heads:
        return None
    parts = []
    for i, m in enumerate(heads):
        start = 0 if i == 0 else m.start()
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        parts.append(DocumentPart(i, m["name"].strip(), start, end, "header"))
    return parts


def _title_of(text: str, bl, k: int) -> tuple[int, str]:
    """Start offset and name of the document whose opening is block ``k``: the heading blocks
    just above it (at most ``_TITLE_LOOKBACK``, no more than ``_TITLE_GAP`` apart), or block ``k``
    itself when it is the title line. A title numbered 1 ("1. License Agreement for NVIDIA SDKs")
    is where the document begins: nothing above it is looked at."""
    own = " ".join(html_visible(text[bl[k].start:bl[k].end]).split())
    title_line = bl[k].heading or _is_title(text, bl, k)
    start, at = bl[k].start, bl[k].start
    names = [own] if title_line else []
    numbered_one = title_line and re.match(r"1[.)]?\s", own) is not None
    lookback = 0 if numbered_one else _TITLE_LOOKBACK
    for j in range(k - 1, max(-1, k - 1 - lookback), -1):
        b = bl[j]
        if not b.heading or at - b.end > _TITLE_GAP or _SIGNATURE.match(text[b.start:b.end]):
            break
        if text.rfind("<!--", 0, b.start) > text.rfind("-->", 0, b.start):
            break  # a line of an HTML comment ("SPDX-License-Identifier: ..."), see _file_markup_above
        start, at = b.start, b.start
        names.append(" ".join(html_visible(text[b.start:b.end]).split()))
    in_order = names[::-1]
    named = [n for n in in_order if _TITLE_WORDS.search(n)]
    if named:
        name = re.sub(r"^1[.)]?\s+", "", named[0])
        above = in_order[:in_order.index(named[0])]  # heading lines above the title, none naming an instrument
        if above and _ORGANISATION.search(above[-1]):
            # "GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE AGREEMENT": whose agreement it is, so
            # that several end-user licences of one case file are told apart.
            name = f"{above[-1].rstrip(' ,.')} {name}"
        return _file_markup_above(text, start), _named_in_text(_MARKUP.sub("", _INLINE_TAG.sub("", name)).strip(), text,
                                                             bl[k].end)[:120]
    # The instrument the opening names: "this Evaluation Agreement" before "the terms" it mentions.
    m = (re.search(rf"\bthis\s+((?:[\w&'-]+\s+){{0,8}}?{_INSTRUMENT})\b", own, re.I)
         or re.search(rf"(?:this|the)\s+((?:[\w&'-]+\s+){{0,8}}?{_INSTRUMENT})\b", own, re.I))
    return _file_markup_above(text, start), (m.group(1) if m else "document")[:120]


# Markdown marks around a title line ("# Basecamp Terms of Service", "**MASTER AGREEMENT**"): layout, not name.
_MARKUP = re.compile(r"^\#{1,6}[ \t]+|(?<!\w)[*_]{1,3}|[*_]{1,3}(?!\w)|[ \t]+\#+$")


# A line that names an organisation: a heading of it above a title says whose agreement it is.
_ORGANISATION = re.compile(r"^[^\n]{2,60}?,?\s+(?:Inc|LLC|L\.L\.C|Ltd|Limited|GmbH|AG|S\.A|B\.V|PLC|Corp|Corporation|"
                           r"Co|LLP|SE|SAS)\.?$", re.I)

# A title that names no instrument of its own: every Common Paper agreement's terms are headed
# "Standard Terms", so a case file of four of them would list four documents of one name.
_GENERIC_TITLE = re.compile(r"^(?:the\s+)?(?:standard|general|common|master)?\s*terms(?:\s+and\s+conditions)?\W*$",
                            re.I)
_SELF_NAME = re.compile(rf"\bthis\s+((?:[A-Z][\w&'\u2019-]*\s+){{0,6}}{_INSTRUMENT})\b", re.I)
_SELF_NAME_WINDOW = 1500


def _named_in_text(title: str, text: str, after: int) -> str:
    """``title``, or for a generic one the name the text gives itself soon after it ("This Mutual
    Non-Disclosure Agreement (which incorporates these Standard Terms ...)" ->
    "Mutual Non-Disclosure Agreement (Standard Terms)")."""
    if not _GENERIC_TITLE.match(title):
        return title
    for m in _SELF_NAME.finditer(text, after, after + _SELF_NAME_WINDOW):
        words = m.group(1).split()
        if len(words) > 1 and all(w[:1].isupper() for w in words):  # a proper name, not "this agreement"
            return f"{' '.join(words)} ({title})"
    return title


# What a file written as Markdown or a template carries above its title, no part of its text but of its file:
# YAML front matter between two "---" lines, an HTML comment (an SPDX line, a source note), a template tag line.
_FRONT_MATTER = re.compile(r"(?m)^---[ \t]*\n(?:[ \t]*(?:[\w-]+:|-[ \t])[^\n]*\n){1,40}?---[ \t]*$")
_COMMENT = re.compile(r"(?:^|\n)[ \t]*<!--(?:(?!-->).){0,1500}?-->[ \t]*$", re.S)
_TEMPLATE_LINE = re.compile(r"(?:^|\n)[ \t]*\{%[^\n]{0,200}?%\}[ \t]*$")
_MARKUP_ABOVE_CHARS = 2000


# A letter that encloses the agreement (an offer of employment, an engagement letter): its salutation a short
# way above the title, no signature or close between, starts the document.
_SALUTATION = re.compile(r"(?m)^[^\w\n]{0,3}Dear\s+[^\n]{1,80},[ \t]*$")
_LETTER_CHARS = 1500


def _file_markup_above(text: str, start: int) -> int:
    """``start`` moved up over the front matter, comments and template tag lines right above it, and
    over the covering letter of the agreement (see ``_SALUTATION``)."""
    letter = list(_SALUTATION.finditer(text, max(0, start - _LETTER_CHARS), start))
    if letter and not _CLOSE.search(text, letter[-1].start(), start) and not any(
            _SIGNATURE.match(line) for line in text[letter[-1].start():start].splitlines()):
        start = letter[-1].start()
    while True:
        off = max(0, start - _MARKUP_ABOVE_CHARS)
        # front matter ending right above ``start``, or holding it (a "- item" line of it read as a heading)
        front = [m for m in _FRONT_MATTER.finditer(text, off, start + 300)
                 if m.start() < start and (m.end() > start or not text[m.end():start].strip())]
        if front:
            start = front[-1].start()
            continue
        head = text[off:start].rstrip()
        m = _COMMENT.search(head) or _TEMPLATE_LINE.search(head)
        if m is None:
            return start
        start = off + m.start() + (1 if m.group(0).startswith("\n") else 0)


def _restarts_numbering(text: str, at: int) -> bool:
    """Whether the first numbered line within ``_RESTART_WINDOW`` after ``at`` is number 0 or 1."""
    first = _NUMBERED.search(text, at, at + _RESTART_WINDOW)
    return first is not None and first["n"] in ("0", "1", "I")


def _begins_itself(text: str, bl, k: int) -> bool:
    """Whether a block within ``_SELF_WINDOW`` after block ``k`` begins the way an instrument's text does."""
    end = bl[k].end + _SELF_WINDOW
    for b in bl[k + 1:]:
        if b.start > end:
            return False
        if _SELF_START.match(text[b.start:b.start + 300]):
            return True
    return False


def _opens(text: str, bl, k: int) -> bool:
    """Whether block ``k`` opens a document: an agreement's preamble sentence, or a title line
    naming an instrument after which the numbering starts again at 1 (see :func:`_is_title`)."""
    b = bl[k]
    if not b.heading and _OPENING.match(text[b.start:min(b.end, b.start + 900)]):
        return True
    if (not b.heading and k + 1 < len(bl) and _OPENING_DATED.match(text[b.start:min(b.end, b.start + 600)])
            and _PARTIES_NEXT.match(text[bl[k + 1].start:bl[k + 1].end])):
        return True  # "This Agreement is dated ..." with "BETWEEN:" / "PARTIES" below it
    return _is_title(text, bl, k) or _is_acceptance(text, bl, k)


def _is_acceptance(text: str, bl, k: int) -> bool:
    """Whether block ``k`` is an untitled click-through opening (see ``_ACCEPTANCE``) that the
    numbering restarting at 1 after it confirms."""
    b = bl[k]
    if b.heading or _NUMBERED.match(text, b.start):
        return False  # a clause of an agreement ("2. Acceptance. By using ..."), not its opening
    head = text[b.start:min(b.end, b.start + _ACCEPTANCE_CHARS)]
    return (_ACCEPTANCE.search(head) is not None and _ACCEPTANCE_NAMES.search(text, b.start, b.end) is not None
            and _restarts_numbering(text, b.end))


_INLINE_TAG = re.compile(r"</?(?:strong|b|em|i|u|span|font)\b[^>]{0,200}>", re.I)
# A line that refers to its instrument ("Changes to these Terms", "Termination of this Agreement") is a clause
# heading or a sentence of the instrument; a title names it.
_REFERS = re.compile(r"\b(?:this|these)\s+(?:[\w'\u2019-]+\s+){0,4}?(?:agreement|terms|licen[cs]e|contract|nda)\b",
                     re.I)
# The words that begin an agreement's operative part, after its recitals.
_OPERATIVE = re.compile(r"(?:now,?\s+therefore|it\s+is\s+(?:hereby\s+)?agreed|the\s+parties\s+(?:hereby\s+)?agree)\b",
                        re.I)


def _is_title(text: str, bl, k: int) -> bool:
    """Whether block ``k`` is a title line naming an instrument, confirmed by what follows it."""
    b = bl[k]
    if not b.heading and ("\n" in text[b.start:b.end] or b.end - b.start > 90):
        return False  # a paragraph, not a title line
    nxt = bl[k + 1] if k + 1 < len(bl) else None
    if nxt is not None and nxt.heading and _TITLE.match(" ".join(html_visible(text[nxt.start:nxt.end]).split())):
        return False  # the next line is the title proper ("GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE ...")
    line = " ".join(html_visible(text[b.start:b.end]).split())  # "<h1>Account Agreement</h1>": its visible text
    line = _INLINE_TAG.sub("", line)  # "<strong>MASTER AGREEMENT</strong>": emphasis, as "**...**" is
    if line.lower().strip(" .:") == "terms and conditions":
        return False  # the heading of a licence's operative part (GPL), not a title
    if line[:1].isdigit() and (len(line.split()) < 4 or line.endswith(".")):
        return False  # "1. LICENSE.": a first section; "1. License Agreement for NVIDIA SDKs" may be a title
    if _REFERS.search(line):
        return False  # "Interpreting these Use Terms", "... apply in this Agreement.": a clause names its instrument so
    if nxt is not None and _OPERATIVE.match(html_visible(text[nxt.start:nxt.start + 200]).lstrip("*_ \t")):
        return False  # "AGREEMENT" over "NOW, THEREFORE, ...": the heading of the operative part after the recitals
    return _TITLE.match(line) is not None and (_restarts_numbering(text, b.end) or _begins_itself(text, bl, k))


def split_documents(text: str) -> list[DocumentPart]:
    """The documents of ``text`` in order; their spans tile it (see the module docstring)."""
    if (parts := _from_headers(text)) is not None:
        return parts
    bl = blocks(text)
    openings = [k for k, b in enumerate(bl) if _opens(text, bl, k)]
    starts: list[tuple[int, str]] = []
    for k in openings:
        start, name = _title_of(text, bl, k)
        label_at = start  # an attachment's label may sit on the short line right above the title, not a heading
        if k and bl[k - 1].end - bl[k - 1].start <= 80 and bl[k].start - bl[k - 1].end <= _TITLE_GAP:
            label_at = min(start, bl[k - 1].start)
        if starts and _attached(text, starts[-1][0], label_at, bl[k].end) and not _OPENING.match(text, bl[k].start):
            continue  # "EXHIBIT B / STATEMENT OF WORK": part of the agreement before it (a preamble would open one)
        if starts:
            between = text[starts[-1][0]:start]
            titled = start < bl[k].start or _is_title(text, bl, k)
            if len(between) < (MIN_TITLED_CHARS if titled else MIN_DOCUMENT_CHARS) and not _CLOSE.search(between):
                continue  # a recital or a restated preamble inside the same agreement
        starts.append((start, name))
    if len(starts) < 2:
        return [DocumentPart(0, starts[0][1] if starts else "document", 0, len(text), "whole")]
    spans = []
    first = starts[0][0]
    if first <= _LEAD_CHARS or _legal_block(text, bl, 0, first):
        starts[0] = (0, starts[0][1])  # a cover page or an index before the first agreement belongs to it
    else:
        spans.append((0, first, "other text", "other"))
    for i, (s, name) in enumerate(starts):
        spans.append((s, starts[i + 1][0] if i + 1 < len(starts) else len(text), name, "opening"))
    return [DocumentPart(i, name, s, e, how) for i, (s, e, name, how) in enumerate(spans)]


def _attached(text: str, previous: int, start: int, end: int) -> bool:
    """Whether the title lines ``text[start:end]`` carry an attachment's label that the document
    beginning at ``previous`` names ("the Services described in Exhibit B"): an exhibit of that
    agreement, not a new document. A licence filed as "EXHIBIT 1" that nothing before names is one."""
    label = _ATTACHMENT.search(text, start, end)
    if label is None:
        return False
    word, ident = label.group(0).split()[-2:]
    word = re.sub(r"^\W+", "", word)
    return re.search(rf"\b{word}\s+{re.escape(ident)}\b", text[previous:start], re.I) is not None


def _legal_block(text: str, bl, start: int, end: int) -> bool:
    """Whether a block in ``[start, end)`` has two distinct words of legal drafting."""
    for b in bl:
        if b.start >= end:
            return False
        if b.start >= start and len({m.group(0).lower() for m in _LEGAL_WORDS.finditer(text, b.start, b.end)}) >= 2:
            return True
    return False


@functools.lru_cache(maxsize=4)
def _split_cached(digest: str, text: str) -> tuple[DocumentPart, ...]:
    return tuple(split_documents(text))


def documents_of(text: str) -> tuple[DocumentPart, ...]:
    """:func:`split_documents`, cached per text (every agent of a review asks for the same split)."""
    return _split_cached(hashlib.sha256(text.encode()).hexdigest(), text)


def _shift(st: DocumentStructure, text: str, off: int) -> DocumentStructure:
    sections = tuple(replace(s, start=s.start + off, body_start=s.body_start + off, end=s.end + off)
                     for s in st.sections)
    units = tuple(replace(u, start=u.start + off, end=u.end + off) for u in st.units)
    terms = tuple(replace(t, start=t.start + off, end=t.end + off) for t in st.terms)
    preamble = (st.preamble[0] + off, st.preamble[1] + off) if st.preamble else None
    return DocumentStructure(text, sections, units, terms, preamble, st.title)


@functools.lru_cache(maxsize=32)
def _part_cached(digest: str, text: str, start: int, end: int) -> DocumentStructure:
    return _shift(parse_structure(text[start:end]), text, start)


def document_structure(text: str, part: DocumentPart | None) -> DocumentStructure:
    """The structure of one document of ``text``, parsed on its own (its numbering restarts
    do not nest it under the previous agreement) but with every span an offset of ``text``,
    so citations, rules and page lookups read the whole text unchanged. ``None``, or a part
    that is the whole text: :func:`structure_of` of the text."""
    if part is None or (part.start == 0 and part.end == len(text)):
        return structure_of(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return _part_cached(digest, text, part.start, part.end)
