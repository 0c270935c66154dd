"""Triton kernel: attention over selected pages whose K/V are fp8 (e4m3) or int8 with float32 scales.

The sibling of :mod:`kernels.triton_attend`'s ``_attend_pages_kernel`` for the page format of
:mod:`kernels.kv_quant`; it shares that module's launch plan (chunks, splits, M tiles), its
launch heuristics and its split merge, so only the page loop differs. The bf16 kernel is left
as it was: folding the scale paths into it as constexpr branches would compile to the same code,
but would make the hot kernel harder to read for a format that is still being evaluated.

Dequantisation happens in registers, in the helpers this kernel shares with the union kernel
(:mod:`kernels.triton_dequant`: where each granularity's scale is applied, and why that costs no
rounding of its own).

Like the bf16 kernel it runs in Triton's CPU interpreter when ``TRITON_INTERPRET=1`` is set
before import (the interpreter loads fp8 and int8; its bf16 ``tl.dot`` is wrong, so operands are
upcast to fp32 there).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .kv_quant import QuantPages
from .triton_attend import INTERPRET, _merge, _outputs, _plan_launch
from .triton_config import TritonConfig, choose_config
from .triton_dequant import SCALE_MODE, dot_f16, pv_dequant, scale_strides, scores_dequant

__all__ = ["triton_attend_selected_quant", "quant_config", "SCALE_MODE"]


def quant_config(q: Tensor, pages: QuantPages, M: int) -> TritonConfig:
    """Launch parameters for a quantised pool: the bf16 heuristics, except fp8 pages with heads of
    <= 128 (Llama-style), which take 8 warps and twice the float rule's tokens per tile (the bytes of
    a bf16 tile). On two H100s (bench/bench_kernels_quant.py, BENCHMARKS §3b) that gave Llama-8B
    heads 1.10-1.16x bf16 at 128K (1.07-1.11x with the float rule) and 1.24-1.38x at 1M
    (1.03-1.05x); Gemma's 256-wide heads lost with it at 1M (0.96-1.02x against 1.10-1.15x), and
    int8 pages were best with the float rule."""
    B, Tq, Hq, D = q.shape
    _, P, Hkv, _ = pages.data.shape
    base = choose_config(B, Tq, Hq, Hkv, D, P, M, q.device)
    if pages.data.dtype != torch.float8_e4m3fn or D > 128:
        return base
    return choose_config(B, Tq, Hq, Hkv, D, P, M, q.device, num_warps=8, block_n=min(2 * base.block_n, P))


@triton.jit(do_not_specialize=["chunks_per_split", "num_splits"])
def _attend_quant_pages_kernel(
    Q, K, V, KS, VS, BT, NB, SL,
    O, LSE, OP, LSEP,
    stride_qb, stride_qt, stride_qh,
    stride_ks, stride_kp, stride_kh,
    stride_vs, stride_vp, stride_vh,
    stride_kss, stride_ksp, stride_ksh, stride_ksd,
    stride_vss, stride_vsp, stride_vsh, stride_vsd,
    stride_btb, stride_btm,
    stride_ob, stride_ot, stride_oh,
    stride_lb, stride_lt, stride_lh,
    Tq, chunks_per_split, num_splits,
    qk_scale, softcap,
    HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
    D: tl.constexpr, BLOCK_D: tl.constexpr, P: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_PER_PAGE: tl.constexpr,
    K_MODE: tl.constexpr, V_MODE: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, DIRECT_OUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, DOT_F16: tl.constexpr,
):
    """Grid (num_splits, B * HKV, m_tiles), as ``_attend_pages_kernel``; K_MODE/V_MODE: SCALE_MODE."""
    split = tl.program_id(0)
    bh = tl.program_id(1)
    mt = tl.program_id(2)
    b = bh // HKV
    kvh = bh % HKV

    rows = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // GROUP
    h = kvh * GROUP + rows % GROUP
    row_mask = rows < Tq * GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    offs_n = tl.arange(0, BLOCK_N)

    q_ptrs = Q + b.to(tl.int64) * stride_qb + t[:, None] * stride_qt + h[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)
    if DOT_F16:  # see kernels.triton_dequant.dot_f16
        q = q.to(tl.float16)

    nb = tl.load(NB + b)
    c_start = split * chunks_per_split
    c_end = tl.minimum(c_start + chunks_per_split, nb * CHUNKS_PER_PAGE)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    bt_row = BT + b.to(tl.int64) * stride_btb
    for c in range(c_start, c_end):
        page = c // CHUNKS_PER_PAGE
        sub = c % CHUNKS_PER_PAGE
        slot = tl.load(bt_row + page * stride_btm).to(tl.int64)
        slen = tl.load(SL + slot)
        tok = sub * BLOCK_N + offs_n
        n_mask = (tok < slen) & (tok < P)
        any_tok = sub * BLOCK_N < slen  # a page-level scale is read only for a chunk with tokens
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(K + slot * stride_ks + tok[:, None] * stride_kp + kvh * stride_kh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(q.dtype)
        s = scores_dequant(q, k, KS + slot * stride_kss + kvh * stride_ksh, tok, offs_d, n_mask, d_mask, any_tok,
                           stride_ksp, stride_ksd, K_MODE, DOT_PRECISION)
        if USE_SOFTCAP:
            x = s * (qk_scale / softcap)
            th = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # tanh without NaN at +-inf
            s = th * (softcap * 1.4426950408889634)
        else:
            s = s * (qk_scale * 1.4426950408889634)
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + slot * stride_vs + tok[:, None] * stride_vp + kvh * stride_vh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(q.dtype)
        pv = pv_dequant(p, v, VS + slot * stride_vss + kvh * stride_vsh, tok, offs_d, n_mask, d_mask, any_tok,
                        stride_vsp, stride_vsd, V_MODE, DOT_PRECISION)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    if DIRECT_OUT:
        o_ptrs = O + b.to(tl.int64) * stride_ob + t[:, None] * stride_ot + h[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
        tl.store(LSE + b.to(tl.int64) * stride_lb + t * stride_lt + h * stride_lh, lse, mask=row_mask)
    else:
        prow = ((b.to(tl.int64) * num_splits + split) * Tq + t) * HQ + h
        tl.store(OP + prow[:, None] * D + offs_d[None, :], out, mask=row_mask[:, None] & d_mask[None, :])
        tl.store(LSEP + prow, lse, mask=row_mask)


def triton_attend_selected_quant(
    q: Tensor,
    k_pages: QuantPages,
    v_pages: QuantPages,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
    config: TritonConfig | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~agentctx.kernels.attend_selected.attend_selected_quant` through the paged split-K
    kernels (inputs validated there). ``config``: an explicit :class:`TritonConfig` (default
    :func:`quant_config`: the bf16 heuristics, or for fp8 pages with heads of <= 128 twice the
    tokens per tile and 8 warps).
    """
    kd, vd = k_pages.data, v_pages.data
    if config is None:
        config = quant_config(q, k_pages, block_table.shape[1])
    plan = _plan_launch(q, kd.shape, block_table.shape[1], config)
    num_blocks = num_blocks.contiguous()
    slot_lens = slot_lens.contiguous()
    out, lse, op, lsep = _outputs(q, plan)
    if out.numel() == 0:
        return out, lse
    B, Tq, Hq, D = q.shape
    Hkv = kd.shape[2]
    config, num_splits, direct = plan.config, plan.num_splits, plan.num_splits == 1
    use_softcap = bool(softcap)
    _attend_quant_pages_kernel[(num_splits, B * Hkv, plan.m_tiles)](
        q, kd, vd, k_pages.scale, v_pages.scale, block_table, num_blocks, slot_lens,
        out, lse, op, lsep,
        q.stride(0), q.stride(1), q.stride(2),
        kd.stride(0), kd.stride(1), kd.stride(2),
        vd.stride(0), vd.stride(1), vd.stride(2),
        *scale_strides(k_pages), *scale_strides(v_pages),
        block_table.stride(0), block_table.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1), lse.stride(2),
        Tq, plan.chunks_per_split, num_splits,
        float(scale), float(softcap) if use_softcap else 1.0,
        HQ=Hq, HKV=Hkv, GROUP=Hq // Hkv, D=D, BLOCK_D=plan.block_d, P=kd.shape[1],
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, CHUNKS_PER_PAGE=plan.chunks_per_page,
        K_MODE=SCALE_MODE[k_pages.granularity], V_MODE=SCALE_MODE[v_pages.granularity],
        USE_SOFTCAP=use_softcap, DIRECT_OUT=direct,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16,
        DOT_F16=dot_f16(q, k_pages),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if not direct:
        _merge(op, lsep, out, lse, plan)
    return out, lse
