"""Plain-PyTorch reference attention (paged/selected and dense).

These functions are the ground truth the GPU kernels are tested against and
the CPU fallback of :func:`kernels.attend_selected`. They favour obviously
correct code over speed: every computation is done in float32, and the paged
version walks the batch row by row, gathering only the valid tokens of the
selected pages (so it never touches padding entries of the block table or
garbage tokens past a slot's length).

The paged function implements the contract of :func:`~agentctx.kernels.attend_selected.attend_selected`
(shapes, grouped-query heads, softcap, ``(out, lse)``, empty rows), which is written down
there once; the dense one follows the same conventions over contiguous keys.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .kv_quant import QuantPages, dequantize_pages
from .merge import merge_many

__all__ = [
    "attend_selected_reference", "attend_selected_quant_reference", "dense_attention_reference", "attention_core",
]

# Upper bound on the number of float32 score elements materialised at once;
# longer key sets are processed in chunks and combined with an exact LSE merge.
_MAX_SCORE_ELEMS = 1 << 26


def _apply_softcap(scores: Tensor, softcap: float | None) -> Tensor:
    if softcap:
        return softcap * torch.tanh(scores / softcap)
    return scores


def attention_core(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    softcap: float | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Exact attention in float32 for one block of keys.

    Args:
        q: (B, Tq, Hq, D).
        k, v: (B, N, Hkv, D), N may be 0.
        scale: multiplier on q·k.
        softcap: optional tanh cap applied after scaling.
        mask: optional bool (B, Tq, N) (or broadcastable); True = visible.

    Returns:
        out (B, Tq, Hq, D) float32, lse (B, Tq, Hq) float32.
    """
    B, Tq, Hq, D = q.shape
    N, Hkv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    if N == 0:
        return (
            torch.zeros(B, Tq, Hq, D, dtype=torch.float32, device=q.device),
            torch.full((B, Tq, Hq), float("-inf"), dtype=torch.float32, device=q.device),
        )
    qg = q.float().reshape(B, Tq, Hkv, group, D)
    s = torch.einsum("bthgd,bnhd->bhgtn", qg, k.float()) * scale  # (B, Hkv, G, Tq, N)
    s = _apply_softcap(s, softcap)
    if mask is not None:
        mask = torch.broadcast_to(mask, (B, Tq, N))
        s = s.masked_fill(~mask[:, None, None, :, :], float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    # Fully masked rows have m = -inf; shift by 0 there so exp gives 0, not NaN.
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    lse = (m + torch.log(denom)).squeeze(-1)  # -inf where denom == 0
    p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.einsum("bhgtn,bnhd->bthgd", p, v.float()).reshape(B, Tq, Hq, D)
    lse = lse.permute(0, 3, 1, 2).reshape(B, Tq, Hq)
    return out, lse


def _attend_chunked(q: Tensor, k: Tensor, v: Tensor, scale: float, softcap: float | None) -> tuple[Tensor, Tensor]:
    """Unmasked attention of q (1, Tq, Hq, D) over k/v (1, N, Hkv, D), chunking N to bound memory."""
    Tq, Hq = q.shape[1], q.shape[2]
    n = k.shape[1]
    chunk = max(1, _MAX_SCORE_ELEMS // max(1, Tq * Hq))
    if n <= chunk:
        return attention_core(q, k, v, scale, softcap)
    outs, lses = [], []
    for start in range(0, n, chunk):
        o, l = attention_core(q, k[:, start : start + chunk], v[:, start : start + chunk], scale, softcap)
        outs.append(o)
        lses.append(l)
    return merge_many(outs, lses)


def attend_selected_reference(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~agentctx.kernels.attend_selected.attend_selected` in float32 PyTorch (inputs validated there).

    Walks the batch row by row and gathers only the valid tokens of the selected pages. Reads
    ``num_blocks`` on the host, i.e. synchronises a CUDA stream.
    """
    B, Tq, Hq, D = q.shape
    P = k_pages.shape[1]
    out = torch.empty(B, Tq, Hq, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Tq, Hq, dtype=torch.float32, device=q.device)
    token_idx = torch.arange(P, device=k_pages.device)
    nbs = num_blocks.tolist()
    for b in range(B):
        slots = block_table[b, : nbs[b]].to(device=k_pages.device, dtype=torch.long)
        valid = token_idx[None, :] < slot_lens.to(k_pages.device)[slots].long()[:, None]  # (nb, P)
        # Boolean indexing keeps only real tokens, in page order then token order.
        k = k_pages[slots][valid].to(q.device)  # (N, Hkv, D)
        v = v_pages[slots][valid].to(q.device)
        o, l = _attend_chunked(q[b : b + 1], k[None], v[None], scale, softcap)
        out[b] = o[0].to(q.dtype)
        lse[b] = l[0]
    return out, lse


def dense_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    causal_offset: int | Tensor | None = None,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention over contiguous keys, optionally causal.

    Args:
        q: (B, Tq, Hq, D).
        k, v: (B, T, Hkv, D).
        scale: multiplier on q·k.
        causal_offset: None for full (non-causal) attention. Otherwise the
            absolute position of query token 0 (int, or (B,) tensor): query
            ``t`` sees keys ``j <= causal_offset + t``. E.g. for a prompt whose
            Tq tokens are the last Tq of the T keys, use ``T - Tq``.
        softcap: optional tanh cap applied after scaling.

    Returns:
        out (B, Tq, Hq, D) in ``q.dtype``, lse (B, Tq, Hq) float32.
    """
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(
            f"dense_attention_reference: expected q (B,Tq,Hq,D), k/v (B,T,Hkv,D); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or q.shape[2] % k.shape[2] != 0:
        raise ValueError(
            f"dense_attention_reference: incompatible q {tuple(q.shape)} and k {tuple(k.shape)} "
            "(need same B and D, Hq % Hkv == 0)"
        )
    B, Tq = q.shape[:2]
    T = k.shape[1]
    mask = None
    if causal_offset is not None:
        off = torch.as_tensor(causal_offset, device=q.device).reshape(-1).long()
        off = torch.broadcast_to(off, (B,))
        qpos = off[:, None] + torch.arange(Tq, device=q.device)[None, :]  # (B, Tq)
        mask = torch.arange(T, device=q.device)[None, None, :] <= qpos[:, :, None]  # (B, Tq, T)
    out, lse = attention_core(q, k, v, scale, softcap, mask)
    return out.to(q.dtype), lse


def attend_selected_quant_reference(
    q: Tensor,
    k_pages: QuantPages,
    v_pages: QuantPages,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~agentctx.kernels.attend_selected.attend_selected_quant` in float32 PyTorch: the pools
    (:class:`~agentctx.kernels.kv_quant.QuantPages`) dequantised to float32, then
    :func:`attend_selected_reference`. Dequantises the whole pool: a reference, not a fast path."""
    k = dequantize_pages(k_pages.data, k_pages.scale, torch.float32)
    v = dequantize_pages(v_pages.data, v_pages.scale, torch.float32)
    return attend_selected_reference(q, k, v, block_table, num_blocks, slot_lens, scale, softcap)
