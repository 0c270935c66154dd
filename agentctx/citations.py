"""Citations: tie a model's quote to an exact span of the source text.

A finding is only as good as its evidence. A quote is *verified* when it occurs
in the document (exactly, or after collapsing whitespace and case, which the
tokenizer round-trip can change); its span then points at the real characters.
A quote that does not occur is kept with the closest span found (for a reader
to inspect) but marked unverified.
"""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, Field

__all__ = ["Citation", "locate_quote", "MIN_QUOTE_CHARS"]

MIN_QUOTE_CHARS = 12  # shorter strings match by accident too easily
_WS = re.compile(r"\s+")


class Citation(BaseModel):
    """Where a finding rests in the source: page, page id and char span [char_start, char_end)."""

    page: int = Field(ge=0)
    page_id: str | None = None
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    quote: str
    verified: bool


def _normalized_index(text: str) -> tuple[str, list[int]]:
    """Lower-cased text with whitespace runs collapsed to one space, and a map back to raw offsets."""
    out, back = [], []
    prev_space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if prev_space:
                continue
            out.append(" ")
            prev_space = True
        else:
            out.append(ch.lower())
            prev_space = False
        back.append(i)
    back.append(len(text))
    return "".join(out), back


def _clean(quote: str) -> str:
    q = quote.strip().strip('"“”\'`').strip()
    return q.rstrip(".;,") if len(q) > MIN_QUOTE_CHARS else q


def locate_quote(text: str, quote: str, hint_start: int = 0, hint_end: int | None = None
                 ) -> tuple[int, int, bool] | None:
    """Find ``quote`` in ``text``; prefer occurrences inside [hint_start, hint_end).

    Returns (char_start, char_end, verified) or None for an empty/too-short quote.
    """
    q = _clean(quote)
    if len(q) < MIN_QUOTE_CHARS:
        return None
    hint_end = len(text) if hint_end is None else hint_end
    # 1. exact, inside the hint window first
    i = text.find(q, hint_start, hint_end)
    if i < 0:
        i = text.find(q)
    if i >= 0:
        return i, i + len(q), True
    # 2. whitespace/case-insensitive
    norm, back = _normalized_index(text)
    nq = _WS.sub(" ", q.lower())
    j = norm.find(nq)
    if j >= 0:
        return back[j], back[j + len(nq) - 1] + 1, True
    # 3. closest block in the hint window: a span for the reader, never verified
    window = text[hint_start:hint_end]
    if not window:
        return None
    m = difflib.SequenceMatcher(None, window, q, autojunk=False).find_longest_match(0, len(window), 0, len(q))
    if m.size == 0:
        return None
    start = hint_start + max(0, m.a - m.b)
    return start, min(len(text), start + len(q)), False
