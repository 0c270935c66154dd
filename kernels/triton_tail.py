"""Triton kernel for :func:`kernels.tail_merge.attend_tail_merged`.

Grid (Hkv, m_tiles): like the page kernel, one program owns one KV head and a tile of
``BLOCK_M`` flattened (query token, head-in-group) rows, streams the tail's slots with
an online softmax (row i masked to slots <= q_slots[i]) and, in the epilogue, merges
its partial with the page partial of the same rows by log-sum-exp. The loop stops at
the largest slot any row of the tile can see, read from the device, so a short tail
costs one or two tiles however large the slot buffer is.
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_tail needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_tail_merged"]


@triton.jit(do_not_specialize=["Tq", "C"])
def _tail_merge_kernel(
    Q, TK, TV, QS, OP, LP, O,
    stride_qt, stride_qh, stride_kc, stride_kh, stride_vc, stride_vh,
    stride_pt, stride_ph, stride_lt, stride_lh, stride_ot, stride_oh,
    Tq, C, qk_scale, softcap,
    GROUP: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    kvh = tl.program_id(0)
    mt = tl.program_id(1)
    rows = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // GROUP
    h = kvh * GROUP + rows % GROUP
    row_mask = rows < Tq * GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    offs_n = tl.arange(0, BLOCK_N)
    io_mask = row_mask[:, None] & d_mask[None, :]

    q = tl.load(Q + t[:, None] * stride_qt + h[:, None] * stride_qh + offs_d[None, :], mask=io_mask, other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)
    qslot = tl.load(QS + t, mask=row_mask, other=-1).to(tl.int32)
    hi = tl.minimum(tl.max(qslot, axis=0) + 1, C)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # log2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(0, hi, BLOCK_N):
        tok = start + offs_n
        n_mask = tok < hi
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(TK + tok[:, None] * stride_kc + kvh * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if USE_SOFTCAP:
            x = s * (qk_scale / softcap)
            th = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # tanh without NaN at saturation
            s = th * (softcap * 1.4426950408889634)
        else:
            s = s * (qk_scale * 1.4426950408889634)
        visible = (tok[None, :] <= qslot[:, None]) & n_mask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(TV + tok[:, None] * stride_vc + kvh * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0)
        # P stays fp32 (the page kernel rounds it to the KV dtype): the tail is short, so the
        # fp32 product is cheap, and it keeps this path as exact as the torch one it replaces.
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new

    # Tail partial (log2 units), then the exact merge with the page partial of the same rows.
    has = l_i > 0.0
    o_tail = acc / tl.where(has, l_i, 1.0)[:, None]
    lse_tail = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    lse_page = tl.load(LP + t * stride_lt + h * stride_lh, mask=row_mask, other=float("-inf")) * 1.4426950408889634
    o_page = tl.load(OP + t[:, None] * stride_pt + h[:, None] * stride_ph + offs_d[None, :], mask=io_mask,
                     other=0.0).to(tl.float32)
    m = tl.maximum(lse_tail, lse_page)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w_page = tl.exp2(lse_page - m_safe)
    w_tail = tl.exp2(lse_tail - m_safe)
    denom = w_page + w_tail
    inv = tl.where(denom > 0.0, 1.0 / denom, 0.0)
    out = o_page * (w_page * inv)[:, None] + o_tail * (w_tail * inv)[:, None]
    tl.store(O + t[:, None] * stride_ot + h[:, None] * stride_oh + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=io_mask)


def triton_tail_merged(q: Tensor, tail_k: Tensor, tail_v: Tensor, q_slots: Tensor, o_pages: Tensor,
                       lse_pages: Tensor, scale: float, softcap: float | None = None) -> Tensor:
    """Launch the kernel; inputs as kernels.tail_merge.attend_tail_merged (validated there)."""
    if q.device.type != "cuda" and not (INTERPRET and q.device.type == "cpu"):
        raise ValueError(f"triton tail attention needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {q.device}")
    tq, hq, d = q.shape
    c, hkv, _ = tail_k.shape
    group = hq // hkv
    for name, x in (("q", q), ("tail_k", tail_k), ("tail_v", tail_v), ("o_pages", o_pages)):
        if x.stride(-1) != 1:
            raise ValueError(f"triton tail attention: {name} needs unit stride on the head dim")
    out = torch.empty_like(q)
    rows = tq * group
    if rows == 0:
        return out
    block_m = 16 if rows <= 16 else (32 if rows <= 32 else 64)
    block_d = triton.next_power_of_2(max(d, 16))
    block_n = 32 if (block_d >= 256 or block_m >= 64) else 64
    use_softcap = bool(softcap)
    grid = (hkv, triton.cdiv(rows, block_m))
    _tail_merge_kernel[grid](
        q, tail_k, tail_v, q_slots, o_pages, lse_pages, out,
        q.stride(0), q.stride(1), tail_k.stride(0), tail_k.stride(1), tail_v.stride(0), tail_v.stride(1),
        o_pages.stride(0), o_pages.stride(1), lse_pages.stride(0), lse_pages.stride(1), out.stride(0), out.stride(1),
        tq, c, float(scale), float(softcap) if use_softcap else 1.0,
        GROUP=group, D=d, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n,
        USE_SOFTCAP=use_softcap, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16,
        num_warps=8 if block_m * block_d >= 64 * 128 else 4, num_stages=2,
    )
    return out
