"""Passages: the unit that selection scores, a few sentences each, mapped to pages.

A 256-token page holds several topics; the one sentence that answers a
question ("Neither party may assign ... without consent") is a small share of
it, and a page-level embedding drowns it. So the document is cut into short
passages (whole sentences of one block, up to ``max_words`` words), each
passage is scored on its own, and a page takes the best score of the passages
that touch it (max pooling). A passage that crosses a page boundary counts
for every page it touches, so a fact cut by a boundary brings both halves.

Each passage also carries the heading of the section it sits in ("7.
Assignment", "LIMITATION OF LIABILITY"): the words a reader would use to find
it are often in the heading, not in the operative sentence. A heading line is a
passage of its own too, marked ``is_heading``, so that scoring can treat it as
a caption rather than as content (retrieval/document.py).

A long sentence also gets **clause windows** (:func:`clause_windows`): a grant
listing a dozen rights, one of them "royalty-free", embeds as one vector in
which that word is a small share; cut at ``;``, ``:``, ``,`` and before
"and"/"or" into windows of a few clauses, one of them is mostly about it. A
window scores for its sentence (the sentence stays the unit of evidence).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .chunking import page_char_spans
from .sentences import blocks, sentence_spans

__all__ = ["Passage", "PassageSet", "build_passages", "clause_windows"]

# Where a long sentence is cut into clause windows: after ; : , or before a joining "and"/"or".
_CLAUSE_CUT = re.compile(r"(?<=[;:,])\s+|\s+(?=(?:and|or|and/or)\s)")


@dataclass(frozen=True, slots=True)
class Passage:
    """``text[char_start:char_end]``: whole sentences of one block; pages ``first_page..last_page``."""

    char_start: int
    char_end: int
    first_page: int
    last_page: int
    heading: str
    is_heading: bool = False  # the passage is a heading line (a caption, not content)


@dataclass(frozen=True)
class PassageSet:
    """The passages of one document, with a row -> page expansion for max pooling.

    Attributes:
        passages: in document order.
        row_passage: ``(n_rows,)`` passage of each (passage, page) pair, sorted by page.
        row_page: ``(n_rows,)`` page of each pair; a passage on two pages has two rows.
        num_pages: pages of the document.
        windows: clause windows of long passages, ``(char_start, char_end)`` each.
        window_passage: ``(n_windows,)`` passage each window belongs to.
    """

    passages: tuple[Passage, ...]
    row_passage: np.ndarray
    row_page: np.ndarray
    num_pages: int
    windows: tuple[tuple[int, int], ...] = ()
    window_passage: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def window_texts(self, text: str) -> list[str]:
        return [" ".join(text[a:b].split()) for a, b in self.windows]

    def words(self, text: str) -> np.ndarray:
        """``(n_passages,)`` words per passage."""
        return np.fromiter((len(text[p.char_start:p.char_end].split()) for p in self.passages),
                           dtype=np.int64, count=len(self.passages))

    def texts(self, text: str, with_heading: bool = True) -> list[str]:
        """What gets scored: the heading (when it is not the passage itself), then the passage."""
        out = []
        for p in self.passages:
            body = " ".join(text[p.char_start : p.char_end].split())
            out.append(f"{p.heading}: {body}" if with_heading and p.heading and p.heading != body else body)
        return out

    def page_max(self, passage_scores: np.ndarray) -> np.ndarray:
        """``(num_pages,)`` best passage score per page (``-inf`` for a page with no passage)."""
        out = np.full(self.num_pages, -np.inf, dtype=np.float32)
        np.maximum.at(out, self.row_page, np.asarray(passage_scores, dtype=np.float32)[self.row_passage])
        return out


def _page_of(bounds: list[int], char: int) -> int:
    """Page whose char span holds ``char`` (``bounds`` = page start chars)."""
    return max(0, bisect.bisect_right(bounds, char) - 1)


def clause_windows(text: str, start: int, end: int, *, min_words: int = 8,
                   max_words: int = 24) -> list[tuple[int, int]]:
    """Clause windows of ``text[start:end]``: pieces cut at ``;`` ``:`` ``,`` and before a joining
    "and"/"or", merged forward until each holds ``min_words`` words (a short tail joins the last
    window); a piece longer than ``max_words`` is cut every ``max_words`` words. ``[]`` when the
    span has no cut (it is one clause)."""
    cuts = [start] + [m.end() if m.group(0).strip() == "" and text[m.start() - 1] in ";:," else m.start()
                      for m in _CLAUSE_CUT.finditer(text, start, end)] + [end]
    pieces: list[tuple[int, int]] = []
    for a, b in zip(cuts, cuts[1:]):
        words = [m.span() for m in re.finditer(r"\S+", text[a:b])]
        for i in range(0, len(words), max_words):
            chunk = words[i:i + max_words]
            pieces.append((a + chunk[0][0], a + chunk[-1][1]))
    if len(pieces) < 2:
        return []
    out: list[tuple[int, int]] = []
    cur: tuple[int, int] | None = None
    for a, b in pieces:
        cur = (a, b) if cur is None else (cur[0], b)
        if len(text[cur[0]:cur[1]].split()) >= min_words:
            out.append(cur)
            cur = None
    if cur is not None:
        if out:
            out[-1] = (out[-1][0], cur[1])
        else:
            out.append(cur)
    return out if len(out) > 1 else []


def build_passages(
    text: str,
    offsets: Sequence[tuple[int, int]],
    page_size: int,
    *,
    max_words: int = 48,
    heading_chars: int = 80,
    clause_words: int = 0,
) -> PassageSet:
    """Cut ``text`` into passages and map each to the pages (of ``page_size`` tokens) it touches.

    Args:
        text: the document.
        offsets: the tokenizer's offset mapping (the same tokens as the KV pages).
        page_size: tokens per page.
        max_words: a passage grows by whole sentences up to this many words (a
            longer sentence is a passage of its own).
        heading_chars: headings are cut to this many characters.
        clause_words: passages of more than this many words also get clause windows
            (:func:`clause_windows`); 0: none.
    """
    spans = page_char_spans(offsets, page_size, text_len=len(text))
    if not spans:
        raise ValueError("cannot build passages of a document with no tokens")
    bounds = [s for s, _ in spans]
    passages: list[Passage] = []
    heading = ""

    def add(a: int, b: int, is_heading: bool = False) -> None:
        # The last char of the passage decides its last page (b is exclusive).
        passages.append(Passage(a, b, _page_of(bounds, a), _page_of(bounds, b - 1), heading, is_heading))

    for blk in blocks(text):
        if blk.heading:
            heading = " ".join(text[blk.start : blk.end].split())[:heading_chars]
            add(blk.start, blk.end, True)
            continue
        cur: tuple[int, int] | None = None
        cur_words = 0
        for a, b in sentence_spans(text, blk.start, blk.end):
            n = len(text[a:b].split())
            if cur is not None and cur_words + n > max_words:
                add(*cur)
                cur, cur_words = None, 0
            cur = (a, b) if cur is None else (cur[0], b)
            cur_words += n
        if cur is not None:
            add(*cur)
    if not passages:  # whitespace only
        passages.append(Passage(0, len(text), 0, len(spans) - 1, ""))
    rows = [(pg, i) for i, p in enumerate(passages) for pg in range(p.first_page, p.last_page + 1)]
    rows.sort()
    row_page = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    row_passage = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    windows: list[tuple[int, int]] = []
    owner: list[int] = []
    if clause_words > 0:
        for i, p in enumerate(passages):
            if not p.is_heading and len(text[p.char_start:p.char_end].split()) > clause_words:
                w = clause_windows(text, p.char_start, p.char_end)
                windows += w
                owner += [i] * len(w)
    return PassageSet(tuple(passages), row_passage, row_page, len(spans), tuple(windows),
                      np.asarray(owner, dtype=np.int64))
