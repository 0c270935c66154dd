"""Exact log-sum-exp merge of partial attention results.

Attention over a key set K that is split into disjoint groups K = K_1 ∪ ... ∪ K_n
can be computed group by group and combined exactly afterwards, provided each
partial result carries the log-sum-exp (LSE) of its scores:

    lse   = log(sum_i exp(lse_i))
    out   = sum_i exp(lse_i - lse) * out_i

This is what split-K ("flash-decoding") kernels do in their second stage, and
what callers use to combine attention over shared document pages with
attention over an agent's private tokens.

Shapes: ``out_*`` is ``(..., D)`` and ``lse_*`` is ``(...)`` with the same
leading dims (e.g. ``out`` (B, Tq, Hq, D) and ``lse`` (B, Tq, Hq)). ``lse`` is
the natural-log sum-exp of the (scaled, capped) scores. An empty partial (no
keys) is ``out = 0, lse = -inf`` and contributes nothing; if every partial is
empty the result is ``out = 0, lse = -inf`` (never NaN).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["merge_attention", "merge_many"]


def _check_pair(out: Tensor, lse: Tensor, name: str) -> None:
    if out.dim() < 1 or out.shape[:-1] != lse.shape:
        raise ValueError(
            f"{name}: out must be (..., D) and lse (...) with the same leading dims; "
            f"got out {tuple(out.shape)} and lse {tuple(lse.shape)}"
        )


def merge_attention(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Merge two partial attentions computed over disjoint key sets.

    Args:
        out_a, out_b: (..., D) normalised partial outputs (any float dtype).
        lse_a, lse_b: (...) natural-log sum-exp of each partial's scores;
            ``-inf`` marks an empty partial.

    Returns:
        ``(out, lse)``: out (..., D) in ``out_a.dtype``, lse (...) float32.
    """
    _check_pair(out_a, lse_a, "merge_attention(a)")
    _check_pair(out_b, lse_b, "merge_attention(b)")
    if out_a.shape != out_b.shape:
        raise ValueError(f"merge_attention: out shapes differ: {tuple(out_a.shape)} vs {tuple(out_b.shape)}")
    la = lse_a.float()
    lb = lse_b.float()
    m = torch.maximum(la, lb)
    # When both sides are empty m = -inf and (la - m) would be NaN; shifting by
    # 0 instead keeps exp(-inf) = 0 for both weights.
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa = torch.exp(la - m_safe)
    wb = torch.exp(lb - m_safe)
    denom = wa + wb
    lse = m_safe + torch.log(denom)  # log(0) = -inf for an all-empty row
    inv = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
    out = (out_a.float() * (wa * inv).unsqueeze(-1)) + (out_b.float() * (wb * inv).unsqueeze(-1))
    return out.to(out_a.dtype), lse


def merge_many(outs: Sequence[Tensor], lses: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Merge any number (>= 1) of partial attentions over disjoint key sets.

    Args:
        outs: n tensors (..., D), all the same shape.
        lses: n tensors (...), float, ``-inf`` for empty partials.

    Returns:
        ``(out, lse)``: out (..., D) in ``outs[0].dtype``, lse (...) float32.

    Done in one stacked pass (not pairwise) so the result does not depend on
    the order of rounding across many partials.
    """
    if len(outs) == 0 or len(outs) != len(lses):
        raise ValueError(f"merge_many: need the same non-zero number of outs and lses, got {len(outs)} and {len(lses)}")
    for i, (o, l) in enumerate(zip(outs, lses)):
        _check_pair(o, l, f"merge_many[{i}]")
        if o.shape != outs[0].shape:
            raise ValueError(f"merge_many: outs[{i}] shape {tuple(o.shape)} != outs[0] shape {tuple(outs[0].shape)}")
    lse_stack = torch.stack([l.float() for l in lses], dim=0)  # (n, ...)
    m = lse_stack.amax(dim=0)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp(lse_stack - m_safe)  # (n, ...); 0 for empty partials
    denom = w.sum(dim=0)
    lse = m_safe + torch.log(denom)
    inv = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
    out = torch.zeros(outs[0].shape, dtype=torch.float32, device=outs[0].device)
    for i, o in enumerate(outs):
        out += o.float() * (w[i] * inv).unsqueeze(-1)
    return out.to(outs[0].dtype), lse
