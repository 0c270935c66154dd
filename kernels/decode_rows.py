"""Attention of many one-token decode rows at once, in plain PyTorch (the CPU decode step).

A packed step (serving/runner/batch_forward.py) carries one new token for each running generation.
Attending them row by row costs ~25 small ops per row and layer; on a CPU those ops, not the
arithmetic, are what a batched decode step pays for. These two functions attend a whole batch
of rows with a handful of ops:

* :func:`attend_rows`: each row has its own keys, padded to one length (its selected pages,
  or its private tail), and a validity mask.
* :func:`attend_rows_shared`: every row reads the same keys (a document's sliding window, or
  all of its pages) under its own mask, so the keys are read once for all rows and never
  copied per row.

Both return the log-sum-exp too, so the caller merges partials over disjoint key sets exactly
(``kernels.merge.merge_attention``). The reference is ``positional.masked_attention_with_mask``
applied row by row to each row's visible keys (tests/kernels/test_decode_rows.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["attend_rows", "attend_rows_shared"]


def _softmax_out(scores: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """scores (..., L) fp32 with -inf where hidden; v broadcastable to (..., L, D).
    Returns (probs @ v, lse); a row with nothing visible gives 0 and -inf."""
    lse = torch.logsumexp(scores, dim=-1)
    # Any finite shift works for a row that sees nothing (exp(-inf) = 0 either way).
    probs = torch.exp(scores - lse.clamp_min(torch.finfo(lse.dtype).min).unsqueeze(-1))
    return torch.matmul(probs, v), lse


def _check(q: Tensor, k: Tensor, v: Tensor, valid: Tensor, name: str) -> None:
    if q.dim() != 3 or k.shape != v.shape or k.shape[-1] != q.shape[-1] or q.shape[1] % k.shape[-2]:
        raise ValueError(f"{name}: q (B, Hq, D) and k == v shapes (..., L, Hkv, D) with Hq % Hkv == 0; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if valid.dtype != torch.bool or valid.shape != (q.shape[0], k.shape[-3]):
        raise ValueError(f"{name}: valid must be bool (B, L) = ({q.shape[0]}, {k.shape[-3]}); got "
                         f"{valid.dtype} {tuple(valid.shape)}")


def attend_rows(q: Tensor, k: Tensor, v: Tensor, valid: Tensor, scale: float,
                softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """Row b's query heads over its own keys.

    q: (B, Hq, D); k, v: (B, L, Hkv, D); valid: (B, L) bool, True = row b sees key l.
    Query head h reads KV head h // (Hq // Hkv). Returns out (B, Hq, D) in q.dtype and
    lse (B, Hq) float32; a row with no valid key gives out 0 and lse -inf.
    """
    _check(q, k, v, valid, "attend_rows")
    b, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.float().view(b, hkv, hq // hkv, d)  # (B, Hkv, G, D)
    scores = torch.matmul(qg, k.float().permute(0, 2, 3, 1)) * scale  # (B, Hkv, G, L)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    out, lse = _softmax_out(scores, v.float().permute(0, 2, 1, 3))  # (B, Hkv, G, D)
    return out.reshape(b, hq, d).to(q.dtype), lse.reshape(b, hq)


def attend_rows_shared(q: Tensor, k: Tensor, v: Tensor, valid: Tensor, scale: float,
                       softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """Every row's query heads over one shared key set, each under its own mask.

    q: (B, Hq, D); k, v: (L, Hkv, D); valid: (B, L) bool. The B x G query heads that share a
    KV head become the rows of one matrix product, so the keys are read once. Returns as
    :func:`attend_rows`.
    """
    _check(q, k, v, valid, "attend_rows_shared")
    b, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    qg = q.float().view(b, hkv, g, d).permute(1, 0, 2, 3).reshape(hkv, b * g, d)  # (Hkv, B*G, D)
    scores = torch.matmul(qg, k.float().permute(1, 2, 0)) * scale  # (Hkv, B*G, L)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    hidden = ~valid.repeat_interleave(g, dim=0) if g > 1 else ~valid  # (B*G, L), (row, group) order
    scores = scores.masked_fill(hidden.unsqueeze(0), float("-inf"))
    out, lse = _softmax_out(scores, v.float().transpose(0, 1))  # (Hkv, B*G, D)
    out = out.view(hkv, b, g, d).permute(1, 0, 2, 3).reshape(b, hq, d)
    return out.to(q.dtype), lse.view(hkv, b, g).permute(1, 0, 2).reshape(b, hq)
