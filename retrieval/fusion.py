"""Rank fusion: one page ranking from several scorers that share no scale.

Cosine similarities, BM25 scores and attention key bounds live on unrelated
scales, so they are combined by rank, not by value: reciprocal rank fusion
(Cormack et al., SIGIR 2009) gives page ``p`` the score
``sum_i w_i / (k + rank_i(p))`` with ranks from 1, and ``k = 60`` damps the
head of each list so that one scorer's first place cannot outvote agreement
between the others. Deterministic: ties break by first appearance.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["reciprocal_rank_fusion", "rrf_scores", "top_pages"]


def rrf_scores(
    rankings: Sequence[Sequence[int]], k: float = 60.0, weights: Sequence[float] | None = None
) -> tuple[list[int], list[float]]:
    """Fused pages best-first and their scores, ``sum_i w_i / (k + rank_i(p))`` with ranks from 1.

    A page missing from a ranking gets nothing from it. Ties (e.g. symmetric
    positions in two lists) break by first appearance, scanning the rankings
    in order, so the result depends only on the inputs.
    """
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    score: dict[int, float] = {}
    first_seen: dict[int, int] = {}
    for ranking, w in zip(rankings, weights):
        for rank, page in enumerate(ranking, start=1):
            page = int(page)
            score[page] = score.get(page, 0.0) + w / (k + rank)
            first_seen.setdefault(page, len(first_seen))
    pages = sorted(score, key=lambda p: (-score[p], first_seen[p]))
    return pages, [score[p] for p in pages]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[int]], k: float = 60.0, weights: Sequence[float] | None = None
) -> list[int]:
    """Fused pages best-first (:func:`rrf_scores` without the scores)."""
    return rrf_scores(rankings, k, weights)[0]


def top_pages(page_scores: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` best finite scores, best first (stable for ties); pages scored
    ``-inf`` (no evidence at all) are left out."""
    s = np.asarray(page_scores, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(s))
    n = min(int(n), len(finite))
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    vals = s[finite]
    if n < len(finite):
        part = np.argpartition(-vals, n - 1)[:n]
    else:
        part = np.arange(len(finite))
    order = part[np.lexsort((finite[part], -vals[part]))]  # score desc, then page asc
    return finite[order].astype(np.int64)
