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
  Preambles also list the parties ("The parties to this ... Agreement are A and B") or have them agree
  ("Effective DATE, A ("Consultant") and B agree as follows:"), and a capitals title may run into its
  preamble on one line; a title is confirmed by its parties line too ("Between us, X and you"); an untitled
  "These terms govern ..." opens a document after text that is no drafting.
  A line that refers to its instrument ("Interpreting these Use Terms", "Scope of the Agreement"), a heading
  over "NOW, THEREFORE", an execution line ("Signed as a deed") and a title line straight after clauses
  with no numbering starting again are no titles; comments, front matter, opening HTML tags, a securities
  legend, a cover page over a table of contents and a covering letter right above a title belong to its
  document, and a preamble under its title's cover block ("Effective Date: ...") is that document's.

The rules live in :mod:`.document_starts` (openings) and :mod:`.document_titles` (titles and where a
document begins); openings that no exact rule names are scored on general evidence by :mod:`.document_evidence`
(a title line, a front matter title or a cover block of parties, a preamble after it, a close or text with no legal
voice before it, numbering starting at 1 after it). This module walks the openings into document spans.

Exhibits and schedules stay with the agreement they follow when it names them ("Exhibit B")
unless they open with a preamble of their own. A text with no evidence of several documents is
one document. Everything is a character span of the original text; the spans tile the text.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, replace

from .document_evidence import evidence_opens, label_above
from .document_starts import (
    MIN_DOCUMENT_CHARS,
    MIN_TITLED_CHARS,
    OPENING,
    attached,
    legal_block,
    opening_sentence,
    opens,
)
from .document_titles import CLOSE, SELF_WINDOW, TITLE_GAP, is_title, title_line_between, title_of
from .sentences import blocks
from .structure import DocumentStructure, parse_structure, structure_of

__all__ = ["DocumentPart", "split_documents", "join_documents", "document_header", "documents_of",
           "document_structure"]

_HEADER = re.compile(r"(?m)^=== Document (?P<n>\d+): (?P<name>[^\n]{1,200}?) ===[ \t]*$")
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

def split_documents(text: str) -> list[DocumentPart]:
    """The documents of ``text`` in order; their spans tile it (see the module docstring)."""
    if (parts := _from_headers(text)) is not None:
        return parts
    bl = blocks(text)
    openings = [k for k, b in enumerate(bl) if opens(text, bl, k)]
    starts: list[tuple[int, str]] = []
    for k in openings:
        start, name = title_of(text, bl, k)
        start = label_above(text, start)  # "Exhibit 10.3" and a letterhead above the title: the document's
        label_at = start  # an attachment's label may sit on the short line right above the title, not a heading
        if k and bl[k - 1].end - bl[k - 1].start <= 80 and bl[k].start - bl[k - 1].end <= TITLE_GAP:
            label_at = min(start, bl[k - 1].start)
        if starts and attached(text, starts[-1][0], label_at, bl[k].end) and not _preamble(text, bl[k]):
            continue  # "EXHIBIT B / STATEMENT OF WORK": part of the agreement before it (a preamble would open one)
        if starts:
            between = text[starts[-1][0]:start]
            titled = start < bl[k].start or is_title(text, bl, k) or evidence_opens(text, bl, k)
            if (titled and not is_title(text, bl, k) and start - starts[-1][0] <= SELF_WINDOW
                    and not title_line_between(text, bl, start, bl[k].start)):
                titled = False  # a preamble under a cover block ("Effective Date: ...", addresses), no title of its own
            if len(between) < (MIN_TITLED_CHARS if titled else MIN_DOCUMENT_CHARS) and not CLOSE.search(between):
                continue  # a recital or a restated preamble inside the same agreement
        starts.append((start, name))
    if len(starts) < 2:
        return [DocumentPart(0, starts[0][1] if starts else "document", 0, len(text), "whole")]
    spans = []
    first = starts[0][0]
    if first <= _LEAD_CHARS or legal_block(text, bl, 0, first):
        starts[0] = (0, starts[0][1])  # a cover page or an index before the first agreement belongs to it
    else:
        spans.append((0, first, "other text", "other"))
    for i, (s, name) in enumerate(starts):
        spans.append((s, starts[i + 1][0] if i + 1 < len(starts) else len(text), name, "opening"))
    return [DocumentPart(i, name, s, e, how) for i, (s, e, name, how) in enumerate(spans)]


def _preamble(text: str, b) -> bool:
    """Whether block ``b`` begins a preamble sentence, read on into the blocks after it (a filing's line breaks)."""
    return OPENING.match(text, b.start) is not None or opening_sentence(text, b)


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
