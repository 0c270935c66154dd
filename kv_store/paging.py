"""A document as KV pages: how many, and the character span of each.

A document is tokenized once and cut into pages of ``page_size`` tokens. Spans are made
*contiguous and covering*: page ``i`` ends exactly where page ``i + 1`` begins, the first page
starts at 0 and (when the text length is known) the last page ends at ``len(text)``. Whitespace
that a tokenizer leaves outside every token's offsets is thereby still assigned to some page.
The replica stores the spans in the context's record; retrieval embeds each page's text.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["num_pages_for", "page_char_spans"]


def num_pages_for(num_tokens: int, page_size: int) -> int:
    """Number of pages holding ``num_tokens`` tokens (the last may be partial)."""
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    return -(-num_tokens // page_size)


def page_char_spans(
    offsets: Sequence[tuple[int, int]],
    page_size: int,
    text_len: int | None = None,
) -> list[tuple[int, int]]:
    """Character span of each page from a tokenizer offset mapping.

    Args:
        offsets: ``(char_start, char_end)`` per token, length ``num_tokens``;
            special tokens may have ``(0, 0)``.
        page_size: tokens per page (``P``).
        text_len: length of the text; when given, the last page is extended
            to it so trailing whitespace is not lost.

    Returns:
        ``num_pages`` spans ``(start, end)``, contiguous (``end_i == start_{i+1}``),
        the first starting at 0. A page made only of special tokens gets an
        empty span at its neighbour's boundary.
    """
    n_pages = num_pages_for(len(offsets), page_size)
    if n_pages == 0:
        return []
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    real = off[:, 1] > off[:, 0]  # special tokens hold no text
    big = np.iinfo(np.int64).max
    page_starts = np.minimum.reduceat(np.where(real, off[:, 0], big), np.arange(0, len(off), page_size))
    last_end = int(off[real, 1].max()) if real.any() else 0
    end = last_end if text_len is None else int(text_len)

    # bounds[p] = where page p begins. Page 0 owns any leading text; a page of
    # only special tokens begins where the next real page begins (empty span).
    # Offsets are monotone for ordinary tokenizers, but byte-fallback pieces can
    # overlap, so the running max keeps the spans contiguous and ordered.
    bounds = [0] * (n_pages + 1)
    bounds[n_pages] = end
    for p in range(n_pages - 1, 0, -1):
        start = int(page_starts[p])
        bounds[p] = bounds[p + 1] if start == big else min(start, end)
    for p in range(1, n_pages + 1):
        bounds[p] = max(bounds[p], bounds[p - 1])
    return [(bounds[p], bounds[p + 1]) for p in range(n_pages)]
