"""Query-aware page scoring from the KV cache's keys (Quest-style bounds).

For a page with keys ``k`` (``P`` tokens) the largest attention logit a query
``q`` can reach is bounded, per channel, by whichever of ``q_d * min_d`` and
``q_d * max_d`` is larger (the sign of ``q_d`` decides). Summing over channels
gives an upper bound on ``max_t q · k_t`` that needs only two ``D``-vectors per
page and head, computed once when the page is written. Pages with the highest
bounds are the ones attention could weight most, which complements semantic
retrieval (embeddings see meaning; keys see what this model attends to).

All functions take torch tensors (CPU or CUDA) and keep the device.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch

from .fusion import reciprocal_rank_fusion

__all__ = ["page_key_bounds", "quest_scores", "fuse_rankings"]


def page_key_bounds(
    k_pages: torch.Tensor, valid_tokens: torch.Tensor | Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-page, per-head, per-channel min and max of the keys.

    Args:
        k_pages: ``(num_pages, P, Hkv, D)`` keys.
        valid_tokens: optional ``(num_pages,)`` count of real tokens per page
            (a partial last page's padding must not widen its bounds).

    Returns:
        ``(kmin, kmax)``, each ``(num_pages, Hkv, D)`` in ``k_pages.dtype``.
    """
    if k_pages.ndim != 4:
        raise ValueError(f"k_pages must be (num_pages, P, Hkv, D), got {tuple(k_pages.shape)}")
    if valid_tokens is None:
        return k_pages.amin(dim=1), k_pages.amax(dim=1)
    n, p = k_pages.shape[:2]
    valid = torch.as_tensor(valid_tokens, device=k_pages.device).reshape(n)
    if bool((valid < 1).any()) or bool((valid > p).any()):
        raise ValueError(f"valid_tokens must be in 1..{p}")
    mask = (torch.arange(p, device=k_pages.device)[None, :] < valid[:, None])[:, :, None, None]
    big = torch.finfo(k_pages.dtype).max
    kmin = torch.where(mask, k_pages, torch.full_like(k_pages, big)).amin(dim=1)
    kmax = torch.where(mask, k_pages, torch.full_like(k_pages, -big)).amax(dim=1)
    return kmin, kmax


def quest_scores(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    reduce: Literal["sum", "max"] = "sum",
) -> torch.Tensor:
    """Upper bound of ``q · k`` over each page's keys, reduced over heads.

    Args:
        q: ``(Hq, D)`` query for one position; ``Hq`` must be a multiple of
            ``Hkv`` (grouped-query attention: query head ``h`` reads KV head
            ``h // (Hq // Hkv)``).
        kmin, kmax: ``(num_pages, Hkv, D)`` from :func:`page_key_bounds`.
        reduce: combine heads by ``"sum"`` (overall relevance) or ``"max"``
            (any single head could focus here).

    Returns:
        ``(num_pages,)`` float32 scores; for every page and head the
        per-head bound is ``>= max_t q_h · k_t``.
    """
    if q.ndim != 2 or kmin.ndim != 3 or kmin.shape != kmax.shape:
        raise ValueError(f"bad shapes q={tuple(q.shape)} kmin={tuple(kmin.shape)} kmax={tuple(kmax.shape)}")
    hq, d = q.shape
    hkv = kmin.shape[1]
    if kmin.shape[2] != d or hq % hkv:
        raise ValueError(f"q heads {hq} / dim {d} do not match KV heads {hkv} / dim {kmin.shape[2]}")
    group = hq // hkv
    qf = q.float().reshape(hkv, group, d)  # (Hkv, G, D)
    lo = kmin.float()[:, :, None, :]  # (N, Hkv, 1, D)
    hi = kmax.float()[:, :, None, :]
    # The channel term q_d * k_d is linear in k_d, so its max over the page
    # sits at one end of [min_d, max_d].
    bound = torch.maximum(qf * lo, qf * hi).sum(dim=-1)  # (N, Hkv, G)
    bound = bound.reshape(bound.shape[0], hq)
    return bound.sum(dim=1) if reduce == "sum" else bound.amax(dim=1)


def fuse_rankings(
    embedding_pages: Sequence[int],
    key_scores: torch.Tensor,
    *,
    key_top: int | None = None,
    k: float = 60.0,
    embedding_weight: float = 1.0,
    key_weight: float = 1.0,
) -> list[int]:
    """RRF of an embedding ranking with a Quest ranking from ``key_scores``.

    Args:
        embedding_pages: pages best-first from :class:`DocumentIndex`.
        key_scores: ``(num_pages,)`` from :func:`quest_scores`.
        key_top: keep only this many Quest pages (``None``: all).
    """
    order = torch.argsort(key_scores.float(), descending=True, stable=True)
    if key_top is not None:
        order = order[:key_top]
    return reciprocal_rank_fusion(
        [list(embedding_pages), order.tolist()], k=k, weights=[embedding_weight, key_weight]
    )
