"""Two-level page retrieval: section centroids first, then pages within them.

Vectors belong to pages (a page may have several vectors, one per sub-page
"view"); a page scores the max over its vectors. Sections group
``section_pages`` consecutive pages. A section's centroid is the mean of its
normalised vectors, renormalised. A query scores centroids, keeps the best
sections (enough to hold ``fanout * k`` pages, at least ``min_sections``), and
then scores every vector of those sections exactly.

Documents below ``flat_below_pages`` pages (default 8192 = 2M tokens at
P=256, above the 1M-token context limit) skip the first level and search all
vectors exactly. That is deliberate: an exact scan of a 1M-token document
(~12K vectors) takes about a millisecond, and on needle-style questions a
section centroid barely moves when one sentence in it matters. On the
128K-token benchmark contract, visiting 16 of 33 sections kept only ~0.75 of
needles (flat: 0.99); max-of-k-means and "most distinctive vectors" section
representatives did no better. Centroid routing suits topical questions and
very large collections; the two-level path is kept for those.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .index import VectorIndex, make_index, score_rows

__all__ = ["HierarchicalIndex", "RetrieveResult"]


@dataclass(frozen=True)
class RetrieveResult:
    """Ranked pages for one query.

    Attributes:
        pages: ``(k,)`` int64 page indices, best first, distinct.
        scores: ``(k,)`` float32 scores of those pages, on the method's scale (cosine for
            ``dense``, BM25 for ``lexical``, cosine plus the lexical and answer-type bonuses for ``hybrid``).
        mode: which path of the dense index answered (``"flat"`` or ``"hierarchical"``).
        search_seconds: wall time of the search for this query (all scorers and fusion).
        embed_seconds: wall time to embed the query (0 when cached or given).
        sections_searched: sections visited (``None`` in flat mode).
        method: how pages were ranked (``dense``, ``lexical`` or ``hybrid``).
        evidence: per page, the ``(char_start, char_end)`` of the passage that matched
            the query best (empty when the ranking came from bare vectors).
    """

    pages: np.ndarray
    scores: np.ndarray
    mode: Literal["flat", "hierarchical"]
    search_seconds: float
    embed_seconds: float = 0.0
    sections_searched: int | None = None
    method: str = "dense"
    evidence: tuple[tuple[int, int], ...] = ()

    @property
    def total_seconds(self) -> float:
        return self.search_seconds + self.embed_seconds


def _page_max(scores: np.ndarray, run_starts: np.ndarray, run_pages: np.ndarray,
              k: int) -> tuple[np.ndarray, np.ndarray]:
    """Max score per page over rows grouped in contiguous runs; top ``k`` pages."""
    per_page = np.maximum.reduceat(scores, run_starts) if len(scores) else scores
    k = min(k, len(per_page))
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    top = np.argpartition(-per_page, k - 1)[:k] if k < len(per_page) else np.arange(len(per_page))
    top = top[np.argsort(-per_page[top], kind="stable")]
    return run_pages[top].astype(np.int64), per_page[top].astype(np.float32)


class HierarchicalIndex:
    """Page retrieval over vectors grouped into sections.

    Args:
        vectors: ``(n, dim)`` float32, L2-normalised.
        pages: ``(n,)`` page index of each vector.
        section_pages: pages per section (``S``).
        flat_below_pages: documents with fewer pages use flat search.
        fanout: sections visited hold about ``fanout * k`` pages.
        min_sections: lower bound on sections visited.
    """

    def __init__(
        self,
        vectors: np.ndarray,
        pages: np.ndarray,
        *,
        section_pages: int = 16,
        flat_below_pages: int = 8192,
        fanout: float = 4.0,
        min_sections: int = 8,
    ) -> None:
        vecs = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        pages = np.asarray(pages, dtype=np.int64).reshape(-1)
        if vecs.ndim != 2 or len(vecs) != len(pages):
            raise ValueError(f"vectors {vecs.shape} and pages {pages.shape} disagree")
        if len(vecs) == 0:
            raise ValueError("cannot index an empty document")
        if section_pages <= 0:
            raise ValueError(f"section_pages must be positive, got {section_pages}")
        # Sort rows by page so each page, and each section, is a contiguous run.
        order = np.argsort(pages, kind="stable")
        self._vecs = vecs[order]
        self._pages = pages[order]
        self.num_pages = int(self._pages[-1]) + 1
        self.dim = int(vecs.shape[1])
        self.section_pages = section_pages
        self.fanout = fanout
        self.min_sections = min_sections
        self.mode: Literal["flat", "hierarchical"] = (
            "flat" if self.num_pages < flat_below_pages else "hierarchical"
        )
        change = np.flatnonzero(np.diff(self._pages)) + 1
        self._run_starts = np.concatenate([[0], change]).astype(np.int64)  # first row of each page
        self._run_pages = self._pages[self._run_starts]

        self._flat: VectorIndex | None = None
        self._centroids: VectorIndex | None = None
        if self.mode == "flat":
            self._flat = make_index(len(self._vecs), self.dim)
            self._flat.add(self._vecs, np.arange(len(self._vecs), dtype=np.int64))
        else:
            self._build_sections()

    @property
    def size(self) -> int:
        return int(len(self._vecs))

    def _build_sections(self) -> None:
        sec_of_row = self._pages // self.section_pages
        sections, starts = np.unique(sec_of_row, return_index=True)
        self._sec_ids = sections
        self._sec_bounds = np.append(starts, len(sec_of_row)).astype(np.int64)
        sums = np.add.reduceat(self._vecs, starts, axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = sums / np.maximum(norms, 1e-12)  # mean direction == renormalised sum
        self._centroids = make_index(len(centroids), self.dim)
        self._centroids.add(centroids.astype(np.float32), np.arange(len(centroids), dtype=np.int64))

    # ---------------------------------------------------------------- search
    def search(self, queries: np.ndarray, k: int) -> list[RetrieveResult]:
        """Top-``k`` pages for each of ``(q, dim)`` query vectors (or one ``(dim,)``)."""
        q = np.asarray(queries, dtype=np.float32)
        q = q[None, :] if q.ndim == 1 else q
        k = max(0, min(int(k), self.num_pages))
        return [self._search_one(row, k) for row in q]

    def search_flat(self, query: np.ndarray, k: int) -> RetrieveResult:
        """Exact page ranking over every vector, whatever the document size."""
        t0 = time.perf_counter()
        scores = score_rows(self._vecs, query)
        pages, s = _page_max(scores, self._run_starts, self._run_pages, k)
        return RetrieveResult(pages, s, "flat", time.perf_counter() - t0)

    def _search_one(self, query: np.ndarray, k: int) -> RetrieveResult:
        if self.mode == "flat":
            return self._flat_faiss(query, k)
        return self._hierarchical(query, k)

    def _flat_faiss(self, query: np.ndarray, k: int) -> RetrieveResult:
        t0 = time.perf_counter()
        assert self._flat is not None
        n = self._flat.size
        # Several vectors can share a page, so ask for more rows than pages; if
        # duplicates still leave us short, widen to the whole index.
        want = min(n, max(k, 1) * 2 + 8)
        while True:
            _, rows = self._flat.search(query, want)
            rows = rows[0][rows[0] >= 0]
            pages_seen = self._pages[rows]
            _, first = np.unique(pages_seen, return_index=True)
            if len(first) >= k or want >= n:
                break
            want = min(n, want * 4)
        first.sort()  # first occurrence in rank order keeps each page's best score
        rows = rows[first][:k]
        scores = self._vecs[rows] @ query
        return RetrieveResult(self._pages[rows], scores.astype(np.float32), "flat", time.perf_counter() - t0)

    def _hierarchical(self, query: np.ndarray, k: int) -> RetrieveResult:
        t0 = time.perf_counter()
        assert self._centroids is not None
        n_sec = self._centroids.size
        want = max(self.min_sections, math.ceil(self.fanout * k / self.section_pages))
        while True:
            want = min(want, n_sec)
            _, secs = self._centroids.search(query, want)
            secs = np.sort(secs[0][secs[0] >= 0])
            lo, hi = self._sec_bounds[secs], self._sec_bounds[secs + 1]
            # Page runs inside the gathered rows (pages stay contiguous).
            pg = np.concatenate([self._pages[a:b] for a, b in zip(lo, hi)])
            run_starts = np.concatenate([[0], np.flatnonzero(np.diff(pg)) + 1])
            if len(run_starts) >= k or want >= n_sec:
                break
            want *= 2
        # Sections are contiguous row ranges: score slices, no gather copy.
        scores = np.concatenate([score_rows(self._vecs[a:b], query) for a, b in zip(lo, hi)])
        pages, s = _page_max(scores, run_starts, pg[run_starts], k)
        return RetrieveResult(pages, s, "hierarchical", time.perf_counter() - t0, sections_searched=len(secs))
