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
  agreement, so a recital that restates the parties does not split an agreement in two.

Exhibits and schedules stay with the agreement they follow unless they open with a preamble
of their own. A text with no evidence of several documents is one document. Everything is a
character span of the original text; the spans tile the text.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, replace

from .sentences import blocks
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
    r"[^.;]{0,300}?)?\b(?:by\s+and\s+)?between\b", re.I)
# A title line that names an instrument ("Cloud Service Agreement", "SOFTWARE LICENSE AGREEMENT
# (Version 2)", "Amendment No. 1 to the Master Services Agreement", "Standard Terms"): unnumbered,
# the instrument's word among its last words. Alone it may be an unnumbered heading inside an
# agreement ("Payment Terms"), so it starts a document only when the numbering restarts after it.
_TITLE_INSTRUMENT = (r"(?:agreement|contract|amendment|addendum|license|licence|lease|deed|memorandum\s+of\s+"
                     r"understanding|order\s+form|statement\s+of\s+work|(?:standard|general|master|platform|cloud|"
                     r"online|services?|user)\s+terms|terms\s+(?:and\s+conditions|of\s+(?:service|use)))")
# The instrument's word ends the title, or is followed only by a version, a parenthetical or a
# "for ..." / "to ..." / "- ..." tail: "License Agreement for NVIDIA SDKs", "Public License v. 1.2";
# not "License Grant", a section heading.
_TITLE = re.compile(rf"^[^\w\n]{{0,3}}(?:1\.[ \t]+)?(?![\d(]|end\b|(?:article|section|clause|chapter|part)\s+\w)"
                    rf"(?:[\w&'\u2019\u201c\u201d\x22,.-]+\s+){{0,10}}?{_TITLE_INSTRUMENT}"
                    r"(?:\s*(?:v\.?|version)\s*[\d.]+|\s*\([^)]{0,60}\)|\s+(?:for|to|of|between)\s+.{0,80}|"
                    r"\s*[-\u2013\u2014:]\s+.{0,80})?\W*$", re.I)
_NUMBERED = re.compile(r"(?m)^[ \t]*(?:(?:ARTICLE|Article|SECTION|Section|CLAUSE|Clause)\s+)?(?P<n>\d+|[IVX]+)"
                       r"(?:\.\d+)*[.):]?[ \t]+\S")
_RESTART_WINDOW = 4000  # the first numbered line after a title, looked for this far
# How an instrument's own text begins: it names itself ("This Agreement is ...", "This European Union
# Public Licence applies ..."), states how it is accepted ("By downloading ..."), or opens a preamble.
_SELF_START = re.compile(r"^\W{0,3}(?:(?:this|these)\s+(?:[\w'\u2019-]+\s+){0,8}?(?:agreement|licen[cs]e|terms|"
                         r"amendment|addendum|contract)\b|by\s+(?:downloading|installing|using|accessing|exercising|"
                         r"clicking|signing|executing)\b|preamble\b|version\s+\d|(?:important\s+)?notice\b|(?:please\s+)?read\s+"
                         r"(?:this|the\s+following|carefully|before)\b)", re.I)
_SELF_WINDOW = 1500
_SIGNATURE = re.compile(r"^\s*(?:By|Name|Title|Date|Its|Signature|Signed)\s*:", re.I)
_CLOSE = re.compile(r"\bIN\s+WITNESS\s+WHEREOF\b|\bEND\s+OF\s+TERMS\s+AND\s+CONDITIONS\b"
                    r"|^\s*(?:By|Signature|Signed)\s*:\s*_{3,}|^\s*By\s*:\s*$"
                    r"|\bexecuted\s+(?:this\s+)?(?:Agreement|Amendment)\s+as\s+of\b", re.I | re.M)
_TITLE_WORDS = re.compile(rf"\b{_INSTRUMENT}\b|\bexhibit\b|\bschedule\b|\bannex\b", re.I)
# Without a close in between, two starts this far apart are two documents: an opening sentence
# alone may be a restated preamble; a title confirmed by what follows it is stronger evidence.
MIN_DOCUMENT_CHARS = 6000
MIN_TITLED_CHARS = 200
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
    own = " ".join(text[bl[k].start:bl[k].end].split())
    title_line = bl[k].heading or _is_title(text, bl, k)
    start, at = bl[k].start, bl[k].start
    names = [own] if title_line else []
    numbered_one = title_line and re.match(r"1[.)]?\s", own) is not None
    lookback = 0 if numbered_one else _TITLE_LOOKBACK
    for j in range(k - 1, max(-1, k - 1 - lookback), -1):
        b = bl[j]
        if not b.heading or at - b.end > _TITLE_GAP or _SIGNATURE.match(text[b.start:b.end]):
            break
        start, at = b.start, b.start
        names.append(" ".join(text[b.start:b.end].split()))
    in_order = names[::-1]
    named = [n for n in in_order if _TITLE_WORDS.search(n)]
    if named:
        name = re.sub(r"^1[.)]?\s+", "", named[0])
        above = in_order[:in_order.index(named[0])]  # heading lines above the title, none naming an instrument
        if above and _ORGANISATION.search(above[-1]):
            # "GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE AGREEMENT": whose agreement it is, so
            # that several end-user licences of one case file are told apart.
            name = f"{above[-1].rstrip(' ,.')} {name}"
        return start, _named_in_text(name, text, bl[k].end)[:120]
    m = re.search(rf"(?:this|the)\s+((?:[\w&'-]+\s+){{0,8}}?{_INSTRUMENT})\b", own, re.I)
    return start, (m.group(1) if m else "document")[:120]


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
    return _is_title(text, bl, k)


def _is_title(text: str, bl, k: int) -> bool:
    """Whether block ``k`` is a title line naming an instrument, confirmed by what follows it."""
    b = bl[k]
    if not b.heading and ("\n" in text[b.start:b.end] or b.end - b.start > 90):
        return False  # a paragraph, not a title line
    if k + 1 < len(bl) and bl[k + 1].heading and _TITLE.match(" ".join(text[bl[k + 1].start:bl[k + 1].end].split())):
        return False  # the next line is the title proper ("GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE ...")
    line = " ".join(text[b.start:b.end].split())
    if line.lower().strip(" .:") == "terms and conditions":
        return False  # the heading of a licence's operative part (GPL), not a title
    if line[:1].isdigit() and (len(line.split()) < 4 or line.endswith(".")):
        return False  # "1. LICENSE.": a first section; "1. License Agreement for NVIDIA SDKs" may be a title
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
