"""The nesting of sections: levels from the order in which numbering styles open inside each other.

No fixed hierarchy of styles is assumed ("ARTICLE 3" holds "3.1" in one contract, "a." holds "1." in
one licence and "1." holds "a." in another); a Markdown heading level is absolute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .section_markers import _TOP_KEYWORDS, ordinal

# Keyword headings that hold the bare numbering after them ("ARTICLE 9", "Section 4 - Fees").
_PART_KEYWORDS = frozenset("article section clause".split())
_FIRST_NUMBERS = frozenset("1 a A i I".split())  # where a numbering starts (again)


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

def _successor(prev: str, num: str) -> bool:
    """Whether clause number ``num`` follows ``prev`` at the same level ("3" -> "4", "2.1" -> "2.2")."""
    a, b = prev.split("."), num.split(".")
    if len(a) != len(b) or not all(x.isdigit() for x in a + b):
        return False
    return a[:-1] == b[:-1] and int(b[-1]) == int(a[-1]) + 1


def _resumed_part(stack: list[tuple[str, int]], starts: list[dict], st: dict) -> int | None:
    """The depth of an open keyword heading ("Article 9") whose number the bare clause ``st`` ("10.") follows,
    when the same numbering is open inside that heading and ``st`` does not follow it ("3." -> "10.")."""
    if not st["style"].startswith("num") or not st["number"].isdigit():
        return None
    base = st["style"]
    inner = [d for d, (sk, si) in enumerate(stack) if sk.rstrip("H") == base and _bare(starts[si])]
    if not inner or _successor(starts[stack[inner[-1]][1]]["number"], st["number"]):
        return None
    for d in range(inner[0] - 1, -1, -1):
        outer = starts[stack[d][1]]
        if _part_heading(outer) and ordinal(outer["number"]) == int(st["number"]) - 1:
            return d
    return None


def _innermost(sections: list[Section], offset: int) -> Section | None:
    best = None
    for s in sections:
        if s.start > offset:
            break
        if s.start <= offset < s.end:
            best = s
    return best


def _bare(st: dict) -> bool:
    """A bare clause number ("3.", "(a)", "iv)"), not a keyword, a title line or a Markdown heading."""
    return not st["style"].startswith(("kw:", "head:", "md", "para", "signature")) and st.get("md") is None


def _part_heading(st: dict) -> bool:
    """A keyword heading with a whole number that holds the bare numbering after it: "ARTICLE 9", "Article
    IX - Indemnification"; "Section 4" or "Clause 4" only alone on its line (at the start of a wrapped line
    of running text they are more often a cross-reference)."""
    kw = st["style"][3:] if st["style"].startswith("kw:") else ""
    return kw in _PART_KEYWORDS and ordinal(st["number"]) is not None and (kw == "article" or st["heading"])


# Unnumbered headings of what comes before an agreement's operative articles. Such a part never holds
# the articles: "Preamble" followed by "Article 1 - DEFINITIONS" are siblings.
_PRELIMINARY = re.compile(r"(?:preamble|recitals?|background|introduction|notice|whereas)[\s:.]*", re.I)


def _unnumbered_heading(st: dict, title: re.Pattern) -> bool:
    """An unnumbered heading whose whole title matches ``title``."""
    return st["style"].startswith("head:") and not st["number"] and title.fullmatch(st["title"].strip()) is not None


def _preliminary_at(stack: list[tuple[str, int]], starts: list[dict]) -> int | None:
    """The depth of an open unnumbered preliminary heading ("Preamble", "RECITALS")."""
    return next((d for d, (_, si) in enumerate(stack) if _unnumbered_heading(starts[si], _PRELIMINARY)), None)


# An unnumbered line that dates or versions the document ("Release Date: July 26, 2018", "Effective
# date: ...", "Last updated ...", "Version 2.1") is set like a heading but heads nothing: before, the
# NVIDIA SDK licence's every section sat under its "Release Date".
_METADATA = re.compile(r"(?:(?:release|effective|revision|publication|issue)\s+date|last\s+(?:updated|modified|revised)"
                       r"|(?:updated|dated|revised)\b|version\s+[\d.]+|v\d+(?:\.\d+)+\b).{0,60}", re.I)


def _metadata(st: dict) -> bool:
    return _unnumbered_heading(st, _METADATA)


def _opens_articles(st: dict) -> bool:
    """A part heading ("Article 1", "ARTICLE I") or a first numbered heading ("1. Definitions")."""
    return _part_heading(st) or (st["style"].startswith("num") and bool(st["heading"])
                                 and st["number"] in ("1", "1.0"))


def _first_bare(stack: list[tuple[str, int]], starts: list[dict]) -> int | None:
    """The depth of the outermost bare clause number open on the stack."""
    return next((d for d, (_, si) in enumerate(stack) if _bare(starts[si])), None)


def _listed(st: dict) -> bool:
    """A numbered list item or clause with a known indentation (not a Markdown heading, keyword or title)."""
    return st.get("indent") is not None and st["style"].lstrip("(")[:3] in ("num", "alp", "ALP", "rom", "ROM")


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
        if stack and _metadata(starts[stack[-1][1]]):
            close_to(len(stack) - 1, st["start"])  # a date or version line holds nothing after it
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
        if st.get("md") is not None:
            # A Markdown heading level is absolute: "# Title" is never inside "## ..." nor inside what
            # opened after an earlier "#" (a numbered "3.  # Restrictions" and its items close at the
            # unnumbered "# Right of First Refusal" that follows them).
            deeper = [j for j, (_, si) in enumerate(stack) if (starts[si].get("md") or 99) >= st["md"]]
            if deeper:
                close_to(deeper[0], st["start"])
        if stack and starts[stack[0][1]]["style"] == "signature":
            close_to(0, st["start"])  # what follows the signatures (an exhibit, a schedule) is no part of them
        indented = False
        if _listed(st):
            # Indentation is the nesting of a Markdown or plain-text list: an item set further left closes the
            # items indented under the previous one ("5. <h2>Confidentiality</h2>" after "   4.  Customer
            # will ..."), and an item set further right that starts its numbering again ("       1.  commits a
            # material breach" under "   3.  Either party may terminate ... if the other party:") opens inside
            # the item above it, though both are written "1.".
            out = next((d for d, (_, si) in enumerate(stack) if _listed(starts[si])
                        and starts[si]["indent"] > st["indent"]), None)
            if out is not None:
                close_to(out, st["start"])
            same = [d for d, (sk, _) in enumerate(stack) if sk == k]
            indented = bool(same) and _listed(starts[stack[same[-1]][1]]) and st["number"] in _FIRST_NUMBERS \
                and starts[stack[same[-1]][1]]["indent"] < st["indent"]
        keys = [sk for sk, _ in stack]
        bare_at = _first_bare(stack, starts)
        if (style.startswith("kw:") and style[3:] in _TOP_KEYWORDS) or style == "signature":
            close_to(0, st["start"])
        elif _opens_articles(st) and (pre_at := _preliminary_at(stack, starts)) is not None:
            close_to(pre_at, st["start"])  # the articles begin: the preamble or recitals end here
        elif bare_at is not None and _part_heading(st) and k not in keys:
            # "ARTICLE 9" (or "Article IX", "ARTICLE NINE") after "3. Exceptions": a keyword heading is never
            # part of a bare-numbered clause. Nested under it, the article's restarted "1." would close it
            # and lose its parent.
            close_to(bare_at, st["start"])
        elif (kw_at := _resumed_part(stack, starts, st)) is not None:
            # "10. Indemnification" after "Article 9" and its restarted "1."-"3.": the document's own numbering
            # goes on after the article, as its sibling, not as a child of the article's "3. Exceptions".
            close_to(kw_at, st["start"])
        elif st["heading"] and style == "head:caps" and len(st["title"].split()) >= 4 and stack \
                and re.search(r"\b(AGREEMENT|SUPPLEMENT|SCHEDULE|EXHIBIT|ATTACHMENT|TERMS)\b", st["title"]):
            close_to(0, st["start"])  # a new document part: "TENSORRT SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT"
        elif indented:
            pass  # a restarted numbering indented under an item: its child
        elif k in keys:
            # the innermost item of this numbering when indentation nested it inside another, else the one open
            close_to(len(keys) - 1 - keys[::-1].index(k) if _listed(st) else keys.index(k), st["start"])
        elif bare_at is not None and style == "head:caps" and st["heading"] and i + 1 < len(starts) \
                and _bare(starts[i + 1]) and starts[i + 1]["number"] in _FIRST_NUMBERS \
                and key(starts[i + 1]) in keys:
            # An unnumbered ALL-CAPS title ("INDEMNIFICATION") between numbered clauses, after which the same
            # numbering starts again at "1.": a new part that holds the restarted clauses, not a sub-heading
            # of the last clause (the restart would close that clause and leave the part empty).
            close_to(bare_at, st["start"])
        elif style.startswith("num"):
            # "4. Fees. ..." after the title line "3. Term": the same numbering, written two ways.
            other = k[:-1] if k.endswith("H") else k + "H"
            prev = last_num.get(other, "")
            if other in keys and _listed(st):
                # the open clause of that numbering, not an item indented under it that shares its style
                prev = starts[stack[len(keys) - 1 - keys[::-1].index(other)][1]]["number"]
            if other in keys and _successor(prev, st["number"]):
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
