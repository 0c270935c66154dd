"""Prompt-level mode: an attend plan turned into prompt tokens (for engines without page access).

An engine that cannot attend to chosen KV pages (vLLM) gets the selected pages
as prompt text instead: the document's own token ids of those pages, in
document order, with a short page marker before each run that does not start
at the beginning of the document. With every page selected the prompt is the
full document, token for token, so every agent shares one cacheable prefix
(vLLM's automatic prefix caching then plays the part of our shared KV store).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PromptPlan", "assemble_prompt", "page_runs", "copy_choices", "page_marker_text"]


@dataclass(frozen=True)
class PromptPlan:
    token_ids: list[int]  # what the engine is given: document part + query prompt
    doc_tokens: int  # document tokens in it (the attended tokens)
    runs: tuple[tuple[int, int], ...]  # (first page, last page) of each contiguous run, inclusive


def page_marker_text(page: int) -> str:
    """The marker placed before a run of pages that follows a gap (pages are 0-based)."""
    return f"\n[... page {page} ...]\n"


def page_runs(pages: list[int]) -> list[tuple[int, int]]:
    """Sorted unique pages -> inclusive (first, last) runs of consecutive pages."""
    runs: list[tuple[int, int]] = []
    for p in pages:
        if runs and p == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], p)
        else:
            runs.append((p, p))
    return runs


def assemble_prompt(
    doc_ids: list[int],
    page_size: int,
    pages: list[int] | tuple[int, ...] | None,
    prompt_ids: list[int],
    marker_ids: Callable[[int], list[int]],
) -> PromptPlan:
    """Prompt tokens for a query over ``pages`` of a document (None = the whole document)."""
    num_pages = -(-len(doc_ids) // page_size)
    if pages is None:
        return PromptPlan(list(doc_ids) + list(prompt_ids), len(doc_ids), ((0, num_pages - 1),))
    sel = sorted(set(int(p) for p in pages))
    if not sel:
        raise ValueError("the attend plan selects no pages")
    if sel[0] < 0 or sel[-1] >= num_pages:
        raise ValueError(f"pages out of range for a document of {num_pages} pages: {sel[0]}..{sel[-1]}")
    ids: list[int] = []
    doc_tokens = 0
    runs = page_runs(sel)
    for first, last in runs:
        if first > 0:
            ids += marker_ids(first)
        part = doc_ids[first * page_size : (last + 1) * page_size]
        ids += part
        doc_tokens += len(part)
    return PromptPlan(ids + list(prompt_ids), doc_tokens, tuple(runs))


_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(\"])|\n+")


def copy_choices(page_texts: list[str], min_chars: int = 24, max_choices: int = 512) -> list[str]:
    """Sentences of the given pages' text: the verbatim quotes a copy-constrained answer may give.

    Runs of consecutive pages should be passed joined, so that a sentence crossing a
    page boundary stays whole. Order is document order; duplicates are dropped.
    """
    seen: dict[str, None] = {}
    for text in page_texts:
        for sent in _SENTENCE_END.split(text):
            s = sent.strip()
            if len(s) >= min_chars and s not in seen:
                seen[s] = None
                if len(seen) >= max_choices:
                    return list(seen)
    return list(seen)
