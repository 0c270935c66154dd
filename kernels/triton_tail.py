"""Triton kernel for a query's slot buffers: :func:`kernels.tail_merge.attend_tail_merged` and
:func:`kernels.tail_merge.attend_window`.

Grid (Hkv, m_tiles): like the page kernel, one program owns one KV head and a tile of
``BLOCK_M`` flattened (query token, head-in-group) rows. Row r (query token t) sees the
contiguous band of buffer entries ``[lo_t, hi_t]`` with ``hi_t = OFF + q_slots[t]`` and
``lo_t = hi_t - WINDOW + 1`` (or 0 without a window). The program streams the union of
its rows' bands with an online softmax, reading bounds from the device, so a short
tail costs one or two tiles however large the buffer is. With ``HAS_PAGES`` the
epilogue merges the result with the page partial of the same rows by log-sum-exp.

Split-K (window only, ``SPLIT_OUT``): a decode step of Gemma 3 has one KV head and one row
tile, so a single program would stream the whole 513-entry band, one dependent 32-entry step
after another (~60 us per layer on an H200, latency-bound). With ``NUM_SPLITS > 1`` grid axis
2 cuts each tile's band into equal runs of steps; every program writes an fp32 partial and
its LSE, and the page kernel's split merge (kernels/triton_attend.py) combines them exactly.

Per-token tiles (``PER_TOKEN``, with a ``QB`` lower bound per query token): the decode rows of
many queries in one launch (serving/runner/batch_slots.py). Their buffers are one flat buffer,
row after row, so query token t sees ``[max(lo_t, QB[t]), hi_t]``: its own row's entries only.
Tokens of different rows sit far apart in that buffer, so a tile holds one token's heads
(grid axis 1 is the token) and streams its band alone, not the span of several rows' bands.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_tail needs the 'triton' package (pip install triton)") from exc

from . import tail_tiles
from .triton_attend import INTERPRET, _merge_splits_kernel
from .triton_config import _merge_block_d, _sm_count

__all__ = ["triton_tail_merged", "triton_window"]


@triton.jit(do_not_specialize=["Tq", "C", "OFF", "WINDOW"])
def _slots_kernel(
    Q, K, V, QS, QB, OP, LP, O, OPS, LPS,
    stride_qt, stride_qh, stride_kc, stride_kh, stride_vc, stride_vh,
    stride_pt, stride_ph, stride_lt, stride_lh, stride_ot, stride_oh,
    Tq, C, OFF, WINDOW, qk_scale, softcap,
    GROUP: tl.constexpr, HQ: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    USE_WINDOW: tl.constexpr, HAS_PAGES: tl.constexpr, SPLIT_OUT: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, PER_TOKEN: tl.constexpr,
    LOWP_PV: tl.constexpr,
):
    kvh = tl.program_id(0)
    mt = tl.program_id(1)
    if PER_TOKEN:  # one query token per tile: its GROUP heads
        local = tl.arange(0, BLOCK_M)
        t = tl.zeros([BLOCK_M], dtype=tl.int32) + mt
        h = kvh * GROUP + local % GROUP
        row_mask = local < GROUP
    else:
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
    row_hi = OFF + tl.load(QS + t, mask=row_mask, other=0).to(tl.int32)  # inclusive
    if USE_WINDOW:
        row_lo = row_hi - WINDOW + 1
    else:
        row_lo = tl.zeros([BLOCK_M], dtype=tl.int32)
    if PER_TOKEN:
        row_lo = tl.maximum(row_lo, tl.load(QB + t, mask=row_mask, other=0).to(tl.int32))
    row_hi = tl.where(row_mask, row_hi, -1)
    row_lo = tl.where(row_mask, row_lo, C)
    hi = tl.minimum(tl.max(row_hi, axis=0) + 1, C)
    lo = tl.maximum(tl.min(row_lo, axis=0), 0)
    if SPLIT_OUT:
        # This program's run of whole steps within the tile's band [lo, hi); may be empty.
        split = tl.program_id(2)
        per = tl.cdiv(tl.maximum(hi - lo, 0), BLOCK_N * NUM_SPLITS) * BLOCK_N
        lo = lo + split * per
        hi = tl.minimum(hi, lo + per)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # log2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        tok = start + offs_n
        n_mask = tok < hi
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(K + tok[:, None] * stride_kc + kvh * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if USE_SOFTCAP:
            x = s * (qk_scale / softcap)
            th = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # tanh without NaN at saturation
            s = th * (softcap * 1.4426950408889634)
        else:
            s = s * (qk_scale * 1.4426950408889634)
        visible = (tok[None, :] <= row_hi[:, None]) & (tok[None, :] >= row_lo[:, None]) & n_mask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + tok[:, None] * stride_vc + kvh * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0)
        if LOWP_PV:
            # P rounded to the buffers' half dtype, a tensor-core product, as the page kernel does. In
            # fp32 (below) the product ran on the FMA units: a decode window tile of 16 x 32 x 256 per
            # step, most of the window kernel's time (16 us a layer on an H100 for 16 agents).
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        else:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    if SPLIT_OUT:
        # Partials (NUM_SPLITS, Tq, HQ, D) / (NUM_SPLITS, Tq, HQ) fp32, LSE in natural-log units:
        # the layout _merge_splits_kernel reads with B = 1.
        lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
        prow = (split * Tq + t) * HQ + h
        tl.store(OPS + prow[:, None] * D + offs_d[None, :], out, mask=io_mask)
        tl.store(LPS + prow, lse, mask=row_mask)
    else:
        if HAS_PAGES:
            # Exact LSE merge with the page partial of the same rows (log2 units).
            lse_own = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
            lse_page = tl.load(LP + t * stride_lt + h * stride_lh, mask=row_mask,
                               other=float("-inf")) * 1.4426950408889634
            o_page = tl.load(OP + t[:, None] * stride_pt + h[:, None] * stride_ph + offs_d[None, :], mask=io_mask,
                             other=0.0).to(tl.float32)
            m = tl.maximum(lse_own, lse_page)
            m_safe = tl.where(m == float("-inf"), 0.0, m)
            w_page = tl.exp2(lse_page - m_safe)
            w_own = tl.exp2(lse_own - m_safe)
            denom = w_page + w_own
            inv = tl.where(denom > 0.0, 1.0 / denom, 0.0)
            out = o_page * (w_page * inv)[:, None] + out * (w_own * inv)[:, None]
        tl.store(O + t[:, None] * stride_ot + h[:, None] * stride_oh + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=io_mask)


def _lowp_pv(v: Tensor) -> bool:
    """Whether P @ V runs in the buffers' half dtype (compiled kernels; the interpreter and fp32
    buffers keep fp32). ``AGENTCTX_SLOT_PV_FP32=1`` keeps fp32 everywhere (A/B runs)."""
    return (v.dtype in (torch.float16, torch.bfloat16) and not INTERPRET
            and os.environ.get("AGENTCTX_SLOT_PV_FP32", "0") != "1")


def _block_n(block_d: int, block_m: int) -> int:
    return 32 if (block_d >= 256 or block_m >= 64) else 64


def launch_splits(q: Tensor, k: Tensor, window: int, per_token: bool = False) -> int:
    """The split count :func:`triton_window` uses by default for these shapes (per-token tiles:
    one tile per query token)."""
    group = q.shape[1] // k.shape[1]
    block_d = triton.next_power_of_2(max(q.shape[2], 16))
    rows = q.shape[0] * (tail_tiles.WINDOW_BLOCK_M if per_token else group)
    return tail_tiles.window_splits(rows, k.shape[1], window,
                                    _block_n(block_d, tail_tiles.WINDOW_BLOCK_M), _sm_count(q.device))


def _launch(q, k, v, q_slots, off, window, o_pages, lse_pages, scale, softcap, num_splits=None, q_base=None
            ) -> Tensor:
    if q.device.type != "cuda" and not (INTERPRET and q.device.type == "cpu"):
        raise ValueError(
            f"triton slot attention needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {q.device}")
    tq, hq, d = q.shape
    c, hkv, _ = k.shape
    group = hq // hkv
    for name, x in (("q", q), ("k", k), ("v", v), ("o_pages", o_pages)):
        if x is not None and x.stride(-1) != 1:
            raise ValueError(f"triton slot attention: {name} needs unit stride on the head dim")
    # Contiguous whatever q's layout: the decode step hands over q as a (T, H, D) view of a heads-first
    # tensor, and an output in that permuted layout cost a copy per layer when transformers reshaped it.
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    rows = tq * group
    if rows == 0:
        return out
    has_pages = o_pages is not None
    if not has_pages:  # unused by the kernel; any valid pointers will do
        o_pages, lse_pages = out, out
    per_token = q_base is not None
    kind = "window" if window else "tail_merged"
    block_m = tail_tiles.block_m_for(group, kind) if per_token else tail_tiles.block_m_for(rows, kind)
    block_d = triton.next_power_of_2(max(d, 16))
    block_n = _block_n(block_d, block_m)
    use_softcap = bool(softcap)
    if num_splits is None:
        num_splits = launch_splits(q, k, window, per_token) if window else 1
    if num_splits > 1 and has_pages:
        raise ValueError("triton slot attention: split-K is for the window band only")
    split = num_splits > 1
    if split:
        ops = torch.empty(num_splits, tq, hq, d, dtype=torch.float32, device=q.device)
        lps = torch.empty(num_splits, tq, hq, dtype=torch.float32, device=q.device)
    else:
        ops, lps = out, out  # unused
    tiles = tq if per_token else triton.cdiv(rows, block_m)
    grid = (hkv, tiles, num_splits)
    _slots_kernel[grid](
        q, k, v, q_slots, q_slots if q_base is None else q_base, o_pages, lse_pages, out, ops, lps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        o_pages.stride(0), o_pages.stride(1), lse_pages.stride(0), lse_pages.stride(1), out.stride(0), out.stride(1),
        tq, c, off, window or 0, float(scale), float(softcap) if use_softcap else 1.0,
        GROUP=group, HQ=hq, D=d, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, NUM_SPLITS=num_splits,
        USE_WINDOW=bool(window), HAS_PAGES=has_pages, SPLIT_OUT=split,
        USE_SOFTCAP=use_softcap, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16, PER_TOKEN=per_token, LOWP_PV=_lowp_pv(v),
        num_warps=8 if block_m * block_d >= 64 * 128 else 4, num_stages=2,
    )
    if split:
        lse = torch.empty(tq, hq, dtype=torch.float32, device=q.device)  # written, not needed
        block_dr = _merge_block_d(tq * hq, block_d, _sm_count(q.device))
        block_s = triton.next_power_of_2(num_splits)
        _merge_splits_kernel[(tq * hq, triton.cdiv(d, block_dr))](
            ops, lps, out, lse,
            0, out.stride(0), out.stride(1),
            0, lse.stride(0), lse.stride(1),
            tq, num_splits,
            HQ=hq, D=d, BLOCK_DR=block_dr, BLOCK_S=block_s,
            num_warps=2,
        )
    return out


def triton_tail_merged(q: Tensor, tail_k: Tensor, tail_v: Tensor, q_slots: Tensor, o_pages: Tensor,
                       lse_pages: Tensor, scale: float, softcap: float | None = None, q_base: Tensor | None = None
                       ) -> Tensor:
    """See kernels.tail_merge.attend_tail_merged (inputs validated there)."""
    return _launch(q, tail_k, tail_v, q_slots, 0, None, o_pages, lse_pages, scale, softcap, q_base=q_base)


def triton_window(q: Tensor, k: Tensor, v: Tensor, q_slots: Tensor, offset: int, window: int, scale: float,
                  softcap: float | None = None, num_splits: int | None = None, q_base: Tensor | None = None
                  ) -> Tensor:
    """See kernels.tail_merge.attend_window (inputs validated there). num_splits: programs per row
    tile along the band (None: :func:`kernels.tail_tiles.window_splits`; tests and sweeps set it)."""
    if num_splits is not None and num_splits < 1:
        raise ValueError(f"triton_window: num_splits must be >= 1, got {num_splits}")
    return _launch(q, k, v, q_slots, offset, window, None, None, scale, softcap, num_splits, q_base)
