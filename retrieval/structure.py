"""The structure of a legal document: a section tree, defined terms, the preamble, sentences.

Contracts and licences carry their own structure, and a reader uses it: "ARTICLE 12.
GOVERNING LAW", "8.1 Liability Caps. ...", "(a) ...", "## Termination", an ALL-CAPS
title, a title underlined with dashes, or no headings at all. :func:`parse_structure`
turns the blocks of :mod:`.sentences` into

* **sections**: numbered or titled parts, nested by their numbering style. The level of
  a style is the order in which styles open inside each other ("ARTICLE 3" holds "3.1",
  which holds "(a)"), so no fixed hierarchy of styles is assumed. A numbered item with
  an inline title ("8.1 Liability Caps. Each party ...") gets that title; a document
  without any headings or numbers gets one section per paragraph.
* **units**: the sentences of each section's body, with the clause number and inline
  title left out ("Each party ..." of "8.1 Liability Caps. Each party ..."): what a
  review may quote. Heading lines are never units.
* **defined terms**: ``"Losses" means ...``, ``("Client")``, ``Licensee: means ...``,
  ``**Licensor** means ...``, each with the unit that defines it.
* **preamble**: the text between the title and the first section (where a contract
  names its parties).

Everything is a character span of the original text; nothing here needs a model.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
from dataclasses import asdict, dataclass

from .sentences import Block, blocks, sentence_spans

__all__ = ["Section", "Unit", "DefinedTerm", "DocumentStructure", "parse_structure", "structure_of"]

_KEYWORDS = ("ARTICLE|Article|SECTION|Section|CLAUSE|Clause|PART|Part|CHAPTER|Chapter|SCHEDULE|Schedule|"
             "EXHIBIT|Exhibit|ANNEX|Annex|APPENDIX|Appendix|ATTACHMENT|Attachment")
# Styles that open a new top level whatever is open ("SCHEDULE 1", "PART 2", "EXHIBIT A").
_TOP_KEYWORDS = frozenset("part chapter schedule exhibit annex appendix attachment".split())
# "Section 2 - Scope", "ARTICLE 12. GOVERNING LAW", "Exhibit A" alone; not "Exhibit A attached" or
# "Section 2.1 of this License" at the start of a wrapped line of running text.
_KW = re.compile(rf"(?P<kw>{_KEYWORDS})\s+(?P<num>\d{{1,3}}(?:\.\d{{1,3}})*|[IVXLC]{{1,6}}|[A-Z])\b\.?"
                 r"(?:\s*[-\u2013\u2014:.]\s*|[ \t]*$|[ \t]*\n|\s+(?=[A-Z\"\u201c(]))", re.M)
_NUM = re.compile(r"(?P<num>\d{1,3}(?:\.\d{1,3}){0,4})(?P<close>[.)]|(?=\s))(?:[ \t]+|(?=[A-Z\"\u201c]))")
_PAREN = re.compile(r"\(\s*(?P<num>\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,6})\s*\)[ \t]*")
_LETTER = re.compile(r"(?P<num>[a-zA-Z]|[ivxlcIVXLC]{1,6})(?P<close>[.)])[ \t]+")
_MD = re.compile(r"(?P<hashes>#{1,6})[ \t]+")
_ROMAN = re.compile(r"[ivxlc]{1,6}", re.I)
_SMALL_WORDS = frozenset("a an and as at by for from in of on or the to with under upon its their".split())
_VERBS = re.compile(r"\b(?:shall|will|may|must|means?|is|are|agrees?|grants?|hereby|has|have)\b")
_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][\w'\u2019&/-]*")

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
    ("inline", re.compile(rf"\(\s*(?:the\s+|each\s+(?:a|an)\s+|together\s+(?:the\s+)?|collectively\s+(?:the\s+)?|"
                          rf"hereinafter\s+(?:referred\s+to\s+as\s+)?(?:the\s+)?|referred\s+to\s+as\s+(?:the\s+)?)?"
                          rf"{_Q1}{_TERM}{_Q2}\s*\)")),
    ("inline", re.compile(rf"referred\s+to\s+as\s+(?:the\s+)?{_Q1}{_TERM}{_Q2}")),
    ("inline", re.compile(rf"\b(?:each|individually|together|collectively)\s+(?:a|an|the)?\s*{_Q1}{_TERM}{_Q2}")),
]


@dataclass(frozen=True, slots=True)
class Section:
    """A numbered or titled part: ``text[start:end]``, its body from ``body_start``.

    ``number`` is the clause number as written without punctuation ("12", "8.1", "a",
    "iv"; "" for an unnumbered title or paragraph), ``label`` the marker as written
    ("ARTICLE 12.", "8.1", "(a)"), ``level`` 1 for the top, ``parent`` an index into
    the sections (None at the top), ``style`` the numbering style that set the level.
    """

    index: int
    number: str
    label: str
    title: str
    level: int
    start: int
    body_start: int
    end: int
    parent: int | None
    style: str

    @property
    def name(self) -> str:
        """How a reader refers to it: "12. GOVERNING LAW", "8.1", "(a)", "LIMITATION OF LIABILITY"."""
        return " ".join(x for x in (self.label, self.title) if x) or "(untitled)"


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


def _marker(line: str) -> tuple[str, str, str, int] | None:
    """(style, number, label, end offset) of a clause number at the start of ``line``."""
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


def _letter_style(num: str) -> str:
    if num.isdigit():
        return "pnum"
    if len(num) > 1 or num in "ivxlcIVXLC":
        kind = "roman"  # "i" may still be a letter after "h": resolved against the open styles
    else:
        kind = "alpha"
    return kind.upper() if num.isupper() else kind


def _inline_title(text: str, start: int, end: int) -> tuple[str, int] | None:
    """A short title after a clause number: "Liability Caps." of "8.1 Liability Caps. Each party".

    Returns (title, offset where the body starts) or None. A title has at most 10 words,
    mostly capitalised, no verb of an operative sentence, and ends with ". " or ":".
    """
    m = re.compile(r"[.:](?=\s|$)|\s[-\u2013\u2014]\s").search(text, start, min(end, start + 120))
    if not m:
        return None
    cand = text[start:m.start()].strip().strip("*_")
    words = _WORD.findall(cand)
    if not words or len(cand.split()) > 10 or len(cand) < 3 or _VERBS.search(cand):
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


def _successor(prev: str, num: str) -> bool:
    """Whether clause number ``num`` follows ``prev`` at the same level ("3" -> "4", "2.1" -> "2.2")."""
    a, b = prev.split("."), num.split(".")
    if len(a) != len(b) or not all(x.isdigit() for x in a + b):
        return False
    return a[:-1] == b[:-1] and int(b[-1]) == int(a[-1]) + 1


def parse_structure(text: str, max_sentence_chars: int = 1500) -> DocumentStructure:
    """The section tree, units, defined terms and preamble of ``text`` (see the module doc)."""
    bl: list[Block] = blocks(text)
    starts: list[dict] = []  # section openings, in order
    body_of: dict[int, tuple[int, int]] = {}  # body block -> its body span
    title_lines: list[str] = []
    seen_body = False
    for bi, b in enumerate(bl):
        s, e = _unbox(text, b.start, b.end)
        if s >= e or not any(c.isalnum() for c in text[s:e]):
            continue
        line = text[s:e]
        mk = _marker(line)
        heading = b.heading or (mk is not None and mk[0].startswith("md"))
        if not heading and mk is None and "\n" not in line and _is_title_text(line) and line.isupper() \
                and line.rstrip()[-1:] in ".:":
            heading = True  # an ALL-CAPS title ending with a period ("LIMITATION OF LIABILITY.")
        if not heading and mk is not None and _looks_like_title(line[mk[3]:]):
            heading = True  # "6. Disclaimer of Warranty" alone on its line (inside a box, say)
        if heading and mk is None and (re.search(r"[.!?][\"'\u201d\u2019)\]]$", line) or line[:1].islower()):
            heading = False  # the end of a quotation ("... NVIDIA\n Corporation.\u201d") is no title
        if heading and _is_title_text(line.split("\n", 1)[0]):
            title = text[s + (mk[3] if mk else 0):e].strip().strip("*_#").strip().rstrip(".:").strip()
            if mk is None and not starts and not seen_body:
                title_lines.append(title)  # the document's title lines, before anything else
                continue
            starts.append(dict(block=bi, start=s, body_start=e, number=mk[1] if mk else "",
                               style=mk[0] if mk else ("head:caps" if title.isupper() else "head:title"),
                               label=mk[2] if mk else "", title=title, heading=True))
            continue
        seen_body = True
        if mk is not None and not mk[0].startswith("md"):
            it = _inline_title(text, s + mk[3], e)
            title, body = it if it else ("", s + mk[3])
            starts.append(dict(block=bi, start=s, body_start=body, style=mk[0], number=mk[1], label=mk[2],
                               title=title, heading=False))
            body_of[bi] = (body, e)
            continue
        body_of[bi] = (s, e)
    if not starts:  # no headings or numbers at all: every paragraph is a section
        for bi, (s, _e) in sorted(body_of.items()):
            starts.append(dict(block=bi, start=s, body_start=s, style="para", number="", label="",
                               title="", heading=False))
    sections = _nest(text, starts)
    first = starts[0]["start"] if starts else len(text)
    pre = [sp for bi, sp in sorted(body_of.items()) if sp[1] <= first]
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


def _innermost(sections: list[Section], offset: int) -> Section | None:
    best = None
    for s in sections:
        if s.start > offset:
            break
        if s.start <= offset < s.end:
            best = s
    return best


def _nest(text: str, starts: list[dict]) -> list[Section]:
    """Levels from the order in which numbering styles open inside each other; ends from nesting."""
    stack: list[tuple[str, int]] = []  # (style key, index into starts)
    parent: list[int | None] = []
    level: list[int] = []
    ends = [len(text)] * len(starts)
    last_num: dict[str, str] = {}

    def key(st: dict) -> str:
        style = st["style"]
        if style.startswith("num"):
            return f"{style}{'H' if st['heading'] else ''}"
        return style

    def close_to(depth: int, at: int) -> None:
        while len(stack) > depth:
            _, j = stack.pop()
            ends[j] = at

    for i, st in enumerate(starts):
        k = key(st)
        style = st["style"]
        # "i", "v", "x" after "h", "u", "w": a letter, not a roman numeral.
        if style.lower().lstrip("(").startswith("roman") and len(st["number"]) == 1:
            alpha = k.replace("roman", "alpha").replace("ROMAN", "ALPHA")
            prev = last_num.get(alpha)
            if prev and len(prev) == 1 and ord(st["number"]) == ord(prev) + 1:
                k = alpha
            elif not any(sk == k for sk, _ in stack) and any(sk == alpha for sk, _ in stack) \
                    and st["number"].lower() != "i":
                k = alpha
        keys = [sk for sk, _ in stack]
        if style.startswith("kw:") and style[3:] in _TOP_KEYWORDS:
            close_to(0, st["start"])
        elif st["heading"] and style == "head:caps" and len(st["title"].split()) >= 4 and stack \
                and re.search(r"\b(AGREEMENT|SUPPLEMENT|SCHEDULE|EXHIBIT|ATTACHMENT|TERMS)\b", st["title"]):
            close_to(0, st["start"])  # a new document part: "TENSORRT SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT"
        elif k in keys:
            close_to(keys.index(k), st["start"])
        elif style.startswith("num"):
            # "4. Fees. ..." after the title line "3. Term": the same numbering, written two ways.
            other = k[:-1] if k.endswith("H") else k + "H"
            if other in keys and _successor(last_num.get(other, ""), st["number"]):
                close_to(keys.index(other), st["start"])
        st["style"] = k.rstrip("H") if style.startswith("num") else k
        parent.append(stack[-1][1] if stack else None)
        level.append(len(stack) + 1)
        stack.append((k, i))
        last_num[k] = st["number"]
    close_to(0, len(text))
    out = []
    for i, st in enumerate(starts):
        end = ends[i]
        while end > st["start"] and text[end - 1].isspace():
            end -= 1
        out.append(Section(index=i, number=st["number"], label=st["label"], title=st["title"], level=level[i],
                           start=st["start"], body_start=max(st["start"], min(st["body_start"], end)),
                           end=max(end, st["start"]), parent=parent[i], style=st["style"]))
    return out


def _defined_terms(text: str, units: list[Unit]) -> list[DefinedTerm]:
    out: list[DefinedTerm] = []
    seen: set[tuple[str, int]] = set()
    for u in units:
        chunk = text[u.start:u.end]
        for how, rx in _DEFINES:
            for m in rx.finditer(chunk):
                term = " ".join(m.group(1).split()).strip(" .,:")
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
