"""The structure of a legal document: a section tree, defined terms, the preamble, sentences.

Contracts and licences carry their own structure, and a reader uses it: "ARTICLE 12.
GOVERNING LAW", "8.1 Liability Caps. ...", "(a) ...", "## Termination", an ALL-CAPS
title, a title underlined with dashes, or no headings at all. :func:`parse_structure`
turns the blocks of :mod:`.sentences` into

* **sections**: numbered or titled parts, nested by their numbering style. The level of
  a style is the order in which styles open inside each other ("ARTICLE 3" holds "3.1",
  which holds "(a)"), so no fixed hierarchy of styles is assumed. A numbered item with
  an inline title ("8.1 Liability Caps. Each party ...") gets that title; a document
  without any headings or numbers gets one section per paragraph. The signature block ("IN
  WITNESS WHEREOF", "By: ____", "Name:", "Title:") is a top-level part "Signatures" of its own.
* **units**: the sentences of each section's body, with the clause number and inline
  title left out ("Each party ..." of "8.1 Liability Caps. Each party ..."): what a
  review may quote. Heading lines are never units.
* **defined terms**: ``"Losses" means ...``, ``("Client")``, ``Licensee: means ...``,
  ``**Licensor** means ...``, each with the unit that defines it.
* **preamble**: the text between the title and the first section (where a contract
  names its parties); under an opening heading that names the instrument ("# Service
  terms") and holds the clauses, the text before its first clause.

Everything is a character span of the original text; nothing here needs a model.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
from dataclasses import asdict, dataclass

from .section_markers import (
    _inline_title,
    _is_title_text,
    _lead_in,
    _looks_like_title,
    _marker,
    _md_level,
    _signature_line,
    _signature_opens,
    _unbox,
)
from .section_tree import Section, _innermost, _nest
from .sentences import Block, blocks, html_visible, sentence_spans

__all__ = ["Section", "Unit", "DefinedTerm", "DocumentStructure", "parse_structure", "structure_of"]


# Defined terms. Quotes are straight or curly, single or double.
_Q1, _Q2 = "[\"\u201c\u2018']", "[\"\u201d\u2019']"
_TERM = r"([^\"\u201c\u201d\u2018\u2019\n]{1,60}?)"
_DEFINES = [
    ("means", re.compile(rf"{_Q1}{_TERM}{_Q2}\s*(?:\([^)]{{0,40}}\)\s*)?(?:shall\s+|will\s+)?"
                         r"(?:means?|refers?\s+to|shall\s+have\s+the\s+meaning|has\s+the\s+meaning)\b")),
    ("means", re.compile(r"\*\*([^*\n]{1,60})\*\*\s+means\b")),
    ("means", re.compile(r"(?m)^[ \t]*(?:[\u2014\u2013-][ \t]*)?([A-Z][\w' -]{1,40}):[ \t]*means?\b")),
    ("means", re.compile(rf"(?m)^[ \t]*{_Q1}{_TERM}{_Q2}[ \t]+[-\u2013\u2014:][ \t]+")),
    ("means", re.compile(rf"[\u2014\u2013][ \t]*{_Q1}{_TERM}{_Q2}[ \t]*:")),
    # emphasis around the quotes ("(the **\"Agreement\"**)", "(**\u201cCustomer\u201d**)") is Markdown markup
    # "(a \"Bidder\")" defines a role with the indefinite article
    ("inline", re.compile(rf"\(\s*(?:the\s+|an?\s+|each\s+(?:a|an)\s+|together\s+(?:the\s+)?|"
                          rf"collectively\s+(?:the\s+)?|"
                          rf"hereinafter\s+(?:referred\s+to\s+as\s+)?(?:the\s+)?|referred\s+to\s+as\s+(?:the\s+)?)?"
                          rf"[*_]{{0,3}}{_Q1}{_TERM}{_Q2}[*_]{{0,3}}\s*\)")),
    ("inline", re.compile(rf"referred\s+to\s+(?:below\s+|herein\s+|hereafter\s+)?as\s+(?:the\s+)?{_Q1}{_TERM}{_Q2}")),
    ("inline", re.compile(rf"\b(?:each|individually|together|collectively)\s+(?:a|an|the)?\s*{_Q1}{_TERM}{_Q2}")),
]


# An HTML heading inside a Markdown list item ("9. <h2>Term and termination</h2>"): a web page's source marks
# its clause titles so, whatever their case.
_HTML_HEADING = re.compile(r"\s*<h[1-6][^>]*>(?P<title>[^<>\n]{1,120})</h[1-6]>\s*$", re.I)
_HTML_TAG = re.compile(r"</?h[1-6][^>]*>", re.I)


def _indent(text: str, s: int) -> int | None:
    """The column of ``text[s]`` on its line (a tab to the next multiple of 4), None when something other
    than blanks stands before it (a box border, the end of a previous sentence)."""
    line_start = text.rfind("\n", 0, s) + 1
    before = text[line_start:s]
    if before.strip():
        return None
    return len(before.expandtabs(4))


@dataclass(frozen=True, slots=True)
class Unit:
    """A quotable sentence: ``text[start:end]`` in section ``section`` (None: before any)."""

    start: int
    end: int
    section: int | None
    block: int
    first_in_block: bool


@dataclass(frozen=True, slots=True)
class DefinedTerm:
    """``term`` is defined by ``text[start:end]`` ("means": a definition; "inline": ``("Client")``)."""

    term: str
    start: int
    end: int
    how: str


@dataclass(frozen=True)
class DocumentStructure:
    """Sections (in document order), quotable units, defined terms and the preamble of one text."""

    text: str
    sections: tuple[Section, ...]
    units: tuple[Unit, ...]
    terms: tuple[DefinedTerm, ...]
    preamble: tuple[int, int] | None
    title: str

    def section_at(self, offset: int) -> Section | None:
        """The innermost section holding ``offset`` (None before the first one)."""
        best = None
        for s in self.sections:
            if s.start > offset:
                break
            if s.start <= offset < s.end:
                best = s
        return best

    def path(self, index: int | None) -> list[Section]:
        """The section and its ancestors, outermost first."""
        out = []
        while index is not None:
            s = self.sections[index]
            out.append(s)
            index = s.parent
        return out[::-1]

    def heading_path(self, index: int | None) -> list[str]:
        """Titles from the outermost section to this one (untitled ones left out)."""
        return [s.title for s in self.path(index) if s.title]

    def top(self, index: int | None) -> Section | None:
        p = self.path(index)
        return p[0] if p else None

    def children(self, index: int | None) -> list[Section]:
        return [s for s in self.sections if s.parent == index]

    def units_in(self, start: int, end: int) -> list[Unit]:
        i = bisect.bisect_left([u.start for u in self.units], start)
        out = []
        for u in self.units[i:]:
            if u.start >= end:
                break
            out.append(u)
        return out

    def in_preamble(self, offset: int) -> bool:
        return self.preamble is not None and self.preamble[0] <= offset < self.preamble[1]

    def to_dicts(self) -> list[dict]:
        """The section tree for a report: one dict per section."""
        return [{k: v for k, v in asdict(s).items()} for s in self.sections]


def parse_structure(text: str, max_sentence_chars: int = 1500) -> DocumentStructure:
    """The section tree, units, defined terms and preamble of ``text`` (see the module doc)."""
    bl: list[Block] = blocks(text)
    starts: list[dict] = []  # section openings, in order
    body_of: dict[int, tuple[int, int]] = {}  # body block -> its body span
    title_lines: list[str] = []
    seen_body = False
    last_bi = -1  # the last block read that was not skipped
    title_run: list[int] = []  # indices into starts of the unnumbered title lines just read, in a row
    signing = False  # inside the signature block
    for bi, b in enumerate(bl):
        s, e = _unbox(text, b.start, b.end)
        if s >= e or not any(c.isalnum() for c in text[s:e]):
            continue
        line = text[s:e]
        mk = _marker(line)
        md = _md_level(line, mk)
        opens = _signature_opens(line) if starts and not signing and mk is None else None
        if opens:
            # The signature block is a part of its own at the top, not a section of the last clause: the
            # sides' names and "By:" / "Name:" lines would otherwise nest under "12. Notices" as its titles.
            # Opened by "By:" without "IN WITNESS WHEREOF", it takes the names just above it.
            at = s
            if opens == "field":
                while title_run:
                    at = starts.pop(title_run.pop())["start"]
            starts.append(dict(block=bi, start=at, body_start=at, style="signature", number="", label="",
                               title="Signatures", heading=True, md=None))
            signing = True
        if signing and (mk is not None or (b.heading and bi + 1 < len(bl) and not bl[bi + 1].heading
                                           and bl[bi + 1].end - bl[bi + 1].start > 200)):
            signing = False  # an exhibit or schedule after the signatures: a marker, or a title over a paragraph
        if signing and opens != "witness" and _signature_line(line):
            last_bi = bi
            continue  # a name, "By: ____", "Title: President": not text to quote
        if signing:
            body_of[bi] = (s, e)
            last_bi = bi
            continue
        heading = b.heading or (mk is not None and mk[0].startswith("md"))
        html_title = _HTML_HEADING.match(line, mk[3] if mk is not None and not mk[0].startswith("md") else 0)
        if html_title is not None:
            heading = True
        if heading and html_title is None and mk is not None and mk[0].startswith("md"):
            # "## ***Term*.** The term ...", "# The Buyer will pay ...", "## ... means either:": a
            # paragraph or a lead-in a converter marked as a heading, not a title
            it = _inline_title(text, s + mk[3], e)
            if _lead_in(line[mk[3]:]) or (it is not None and it[1] < e):
                heading = False
        if not heading and mk is None and "\n" not in line and _is_title_text(line) and line.isupper() \
                and line.rstrip()[-1:] in ".:":
            heading = True  # an ALL-CAPS title ending with a period ("LIMITATION OF LIABILITY.")
        if not heading and mk is not None and _looks_like_title(line[mk[3]:]):
            heading = True  # "6. Disclaimer of Warranty" alone on its line (inside a box, say)
        if heading and mk is None and html_title is None \
                and (re.search(r"[.!?][\"'\u201d\u2019)\]]$", line) or line[:1].islower()):
            heading = False  # the end of a quotation ("... NVIDIA\n Corporation.\u201d") is no title
        if heading and _is_title_text(line.split("\n", 1)[0]):
            title = _HTML_TAG.sub("", html_visible(text[s + (mk[3] if mk else 0):e])).strip().strip("*_# ").strip() \
                .rstrip(".:").strip("*_ ")
            if mk is None and not starts and not seen_body:
                title_lines.append(title)  # the document's title lines, before anything else
                continue
            starts.append(dict(block=bi, start=s, body_start=e, number=mk[1] if mk else "",
                               style=mk[0] if mk else ("head:caps" if title.isupper() else "head:title"),
                               label=mk[2] if mk else "", title=title, heading=True, md=md,
                               indent=_indent(text, s) if mk is not None and md is None else None))
            title_run = title_run + [len(starts) - 1] if mk is None else []
            last_bi = bi
            continue
        seen_body = True
        title_run = []
        if mk is not None and mk[0].startswith("md"):
            # A Markdown heading marker before a whole paragraph: a Word document converted to Markdown
            # (pandoc) keeps the heading level of paragraphs whose clause numbers it dropped ("## ***Term*.**
            # The term ..."). The level is the structure: the paragraph opens a section at that level, with
            # its inline title; one right after a title heading of the same level is that title's body.
            it = _inline_title(text, s + mk[3], e)
            prev = starts[-1] if starts else None
            if it is None and prev is not None and prev["heading"] and prev.get("md") == int(mk[0][2:]) \
                    and prev["block"] == last_bi:
                body_of[bi] = (s + mk[3], e)
                last_bi = bi
                continue
            title, body = it if it else ("", s + mk[3])
            starts.append(dict(block=bi, start=s, body_start=body, style=mk[0], number="", label="", title=title,
                               heading=False, md=int(mk[0][2:])))
            body_of[bi] = (body, e)
            last_bi = bi
            continue
        if mk is not None and not mk[0].startswith("md"):
            it = _inline_title(text, s + mk[3], e)
            title, body = it if it else ("", s + mk[3])
            starts.append(dict(block=bi, start=s, body_start=body, style=mk[0], number=mk[1], label=mk[2],
                               title=title, heading=False, md=md, indent=_indent(text, s) if md is None else None))
            body_of[bi] = (body, e)
            last_bi = bi
            continue
        body_of[bi] = (s, e)
        last_bi = bi
    if not starts:  # no headings or numbers at all: every paragraph is a section
        for bi, (s, _e) in sorted(body_of.items()):
            starts.append(dict(block=bi, start=s, body_start=s, style="para", number="", label="",
                               title="", heading=False))
    sections = _nest(text, starts)
    first = starts[0]["start"] if starts else len(text)
    pre = [sp for bi, sp in sorted(body_of.items()) if sp[1] <= first]
    if not pre and len(sections) > 1 and sections[1].parent == 0 and _opening_title(starts[0]):
        # "# Service terms", then "These service terms ... between Canonical ... and the customer ...", then
        # "1." to "12." under it: the heading that opens the text and names the instrument is its title, and
        # the text before its first clause is the preamble, as under a title line
        pre = [sp for bi, sp in sorted(body_of.items()) if sp[0] >= starts[0]["body_start"]
               and sp[1] <= sections[1].start]
    preamble = (pre[0][0], pre[-1][1]) if pre else None
    # Units: the sentences of every body block, in the innermost section that holds them.
    units: list[Unit] = []
    for bi, (s, e) in sorted(body_of.items()):
        sec = _innermost(sections, s)
        for k, (a, z) in enumerate(sentence_spans(text, s, e, max_sentence_chars) if e > s else []):
            units.append(Unit(a, z, sec.index if sec else None, bi, k == 0))
    return DocumentStructure(text=text, sections=tuple(sections), units=tuple(units),
                             terms=tuple(_defined_terms(text, units)), preamble=preamble,
                             title=title_lines[0] if title_lines else "")


_INSTRUMENT_TITLE = re.compile(r"\b(?:agreement|contract|terms|conditions|licen[cs]e|addendum|amendment|deed|lease)\b",
                               re.I)


def _opening_title(st: dict) -> bool:
    """An unnumbered heading that names an instrument ("# Prototype Agreement", "# Service terms")."""
    return bool(st["heading"]) and not st["number"] and st["style"].startswith(("md", "head:")) \
        and _INSTRUMENT_TITLE.search(st["title"]) is not None


def _defined_terms(text: str, units: list[Unit]) -> list[DefinedTerm]:
    out: list[DefinedTerm] = []
    seen: set[tuple[str, int]] = set()
    for u in units:
        chunk = text[u.start:u.end]
        for how, rx in _DEFINES:
            for m in rx.finditer(chunk):
                # emphasis inside the quotes ("\u201c**Customer**\u201d means") is markup, not the term
                term = " ".join(m.group(1).split()).strip(" .,:*_")
                if not term or len(term) > 60 or not term[0].isalnum():
                    continue
                if (term.lower(), u.start) in seen:
                    continue
                seen.add((term.lower(), u.start))
                out.append(DefinedTerm(term, u.start, u.end, how))
    return out


@functools.lru_cache(maxsize=8)
def _cached(digest: str, text: str) -> DocumentStructure:
    return parse_structure(text)


def structure_of(text: str) -> DocumentStructure:
    """:func:`parse_structure`, cached per text (every agent of a review parses the same document)."""
    return _cached(hashlib.sha256(text.encode()).hexdigest(), text)
