"""Pages as retrieval chunks: map token pages back to character spans of the text.

A document is tokenized once by the serving model's tokenizer and cut into pages
of ``page_size`` tokens; the KV cache is stored per page, so a page is also the
unit that retrieval selects. This module turns the tokenizer's offset mapping
into one character span per page, so each page can be embedded as text.

Spans are made *contiguous and covering*: page ``i`` ends exactly where page
``i + 1`` begins, the first page starts at 0 and (when the text length is known)
the last page ends at ``len(text)``. Whitespace that a tokenizer leaves outside
every token's offsets is thereby still assigned to some page, and joining the
chunk texts reconstructs the document exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentctx.kv_store.paging import num_pages_for, page_char_spans

__all__ = ["Chunk", "page_char_spans", "build_chunks", "num_pages_for"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One page of a document, as text.

    ``token_start``/``token_end`` index the document's token sequence (end
    exclusive); ``char_start``/``char_end`` index the text (end exclusive).
    """

    page_index: int
    text: str
    char_start: int
    char_end: int
    token_start: int
    token_end: int

    @property
    def num_tokens(self) -> int:
        return self.token_end - self.token_start


def build_chunks(
    text: str,
    offsets: Sequence[tuple[int, int]],
    page_size: int,
) -> list[Chunk]:
    """Cut ``text`` into one :class:`Chunk` per page of ``page_size`` tokens.

    ``"".join(c.text for c in chunks) == text`` always holds.
    """
    spans = page_char_spans(offsets, page_size, text_len=len(text))
    n_tokens = len(offsets)
    return [
        Chunk(
            page_index=p,
            text=text[s:e],
            char_start=s,
            char_end=e,
            token_start=p * page_size,
            token_end=min((p + 1) * page_size, n_tokens),
        )
        for p, (s, e) in enumerate(spans)
    ]
