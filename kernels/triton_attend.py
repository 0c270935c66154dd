"""Triton kernel: attention of query tokens over selected KV pages.

Design (split-K / "flash-decoding" over pages):

* The selected pages of a row are viewed as a flat sequence of *chunks* of
  ``BLOCK_N`` tokens (``ceil(P / BLOCK_N)`` chunks per page). The chunk range
  ``[0, num_blocks[b] * chunks_per_page)`` is cut into ``num_splits`` equal
  pieces; each program streams one piece with an online softmax and writes a
  normalised partial output plus its log-sum-exp. A second small kernel merges
  the partials exactly (the same math as :func:`kernels.merge.merge_many`).
  With a single split the first kernel writes the final output directly.
* Splitting at chunk rather than page granularity lets even a handful of
  selected pages fill all SMs at decode time (Tq = 1 and e.g. a single KV
  head, as in Gemma-3-270M, leaves no other parallelism).
* GQA: one program owns one KV head and *all* query heads that read it, for a
  tile of ``BLOCK_M`` flattened (query token, head-in-group) rows, so each K/V
  tile is loaded from HBM once per program and fed to a tensor-core ``tl.dot``.
* Padding entries of the block table (index >= num_blocks[b]) are never read,
  and tokens past ``slot_lens[slot]`` are masked out of the loads, so garbage
  (even NaN) in unused page tails cannot leak into the result.

Importing this module requires ``triton``; :mod:`kernels.attend_selected`
imports it lazily. With ``TRITON_INTERPRET=1`` set *before* this module is
imported, the kernels run in Triton's CPU interpreter on CPU tensors (slow;
used by the tests on machines without a GPU).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_attend needs the 'triton' package (pip install triton)") from exc

from .triton_config import TritonConfig, _merge_block_d, _next_pow2, _sm_count, choose_config

__all__ = ["triton_attend_selected", "INTERPRET"]

# Triton picks interpreter vs compiler when a function is decorated, i.e. at
# import of this module; remember which one we got so the launcher can accept
# CPU tensors only when the interpreter is active.
try:
    from triton import knobs as _knobs

    INTERPRET: bool = bool(_knobs.runtime.interpret)  # the very flag triton.jit consults
except (ImportError, AttributeError):  # pragma: no cover - older Triton
    INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _patch_interpreter_scalar_index() -> None:
    """Work around triton-lang/triton#9171 (interpreter only).

    The interpreter stores scalars as 1-element numpy arrays and converts them
    with ``int(arr)`` when used as ``range`` bounds; NumPy >= 2.4 rejects that
    for ndim > 0, so any loop with a data-dependent trip count fails. Triton
    fixed this after 3.6.0 (PR #9172); until then we re-install ``__index__``
    with an explicit element extraction. No effect on compiled (GPU) kernels.
    """
    try:
        from triton.runtime import interpreter as _interp
    except ImportError:  # pragma: no cover
        return
    original = getattr(_interp, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_agentctx_patched", False):
        return

    def _patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    _patched._agentctx_patched = True
    _interp._patch_lang_tensor = _patched


if INTERPRET:
    _patch_interpreter_scalar_index()


# Split sizes change with the block-table width; do not recompile for each
# divisibility class of them.
@triton.jit(do_not_specialize=["chunks_per_split", "num_splits"])
def _attend_pages_kernel(
    Q, K, V, BT, NB, SL,
    O, LSE, OP, LSEP,
    stride_qb, stride_qt, stride_qh,
    stride_ks, stride_kp, stride_kh,
    stride_vs, stride_vp, stride_vh,
    stride_btb, stride_btm,
    stride_ob, stride_ot, stride_oh,
    stride_lb, stride_lt, stride_lh,
    Tq, chunks_per_split, num_splits,
    qk_scale, softcap,
    HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
    D: tl.constexpr, BLOCK_D: tl.constexpr, P: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_PER_PAGE: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, DIRECT_OUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Grid (num_splits, B * HKV, m_tiles). See module docstring."""
    split = tl.program_id(0)
    bh = tl.program_id(1)
    mt = tl.program_id(2)
    b = bh // HKV
    kvh = bh % HKV

    # Flattened rows r = t * GROUP + g: query token t, query head kvh*GROUP+g.
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

    nb = tl.load(NB + b)
    c_start = split * chunks_per_split
    c_end = tl.minimum(c_start + chunks_per_split, nb * CHUNKS_PER_PAGE)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max, log2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    bt_row = BT + b.to(tl.int64) * stride_btb
    for c in range(c_start, c_end):
        page = c // CHUNKS_PER_PAGE
        sub = c % CHUNKS_PER_PAGE
        slot = tl.load(bt_row + page * stride_btm).to(tl.int64)
        slen = tl.load(SL + slot)
        tok = sub * BLOCK_N + offs_n
        # `tok < P` guards against corrupt slot_lens > P reading the next page.
        n_mask = (tok < slen) & (tok < P)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(K + slot * stride_ks + tok[:, None] * stride_kp + kvh * stride_kh + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) fp32
        if USE_SOFTCAP:
            x = s * (qk_scale / softcap)
            # tanh(x) = 1 - 2 / (exp(2x) + 1): saturates to +-1 without NaN.
            th = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)
            s = th * (softcap * 1.4426950408889634)
        else:
            s = s * (qk_scale * 1.4426950408889634)
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # Rows with nothing visible yet keep m = -inf; shift by 0 so exp2 -> 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + slot * stride_vs + tok[:, None] * stride_vp + kvh * stride_vh + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        if UPCAST_DOT:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    if DIRECT_OUT:
        o_ptrs = O + b.to(tl.int64) * stride_ob + t[:, None] * stride_ot + h[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
        tl.store(LSE + b.to(tl.int64) * stride_lb + t * stride_lt + h * stride_lh, lse, mask=row_mask)
    else:
        # Partials are contiguous (B, num_splits, Tq, HQ, D) / (B, num_splits, Tq, HQ) float32.
        prow = ((b.to(tl.int64) * num_splits + split) * Tq + t) * HQ + h
        tl.store(OP + prow[:, None] * D + offs_d[None, :], out, mask=row_mask[:, None] & d_mask[None, :])
        tl.store(LSEP + prow, lse, mask=row_mask)


@triton.jit(do_not_specialize=["num_splits"])
def _merge_splits_kernel(
    OP, LSEP, O, LSE,
    stride_ob, stride_ot, stride_oh,
    stride_lb, stride_lt, stride_lh,
    Tq, num_splits,
    HQ: tl.constexpr, D: tl.constexpr, BLOCK_DR: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """Grid (B * Tq * HQ, cdiv(D, BLOCK_DR)): exact LSE merge over the split axis."""
    pid = tl.program_id(0)
    dblk = tl.program_id(1)
    h = pid % HQ
    bt = pid // HQ
    t = bt % Tq
    b = bt // Tq
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = dblk * BLOCK_DR + tl.arange(0, BLOCK_DR)
    d_mask = offs_d < D

    m = tl.full([1], float("-inf"), dtype=tl.float32)
    l = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([BLOCK_DR], dtype=tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        sp = s0 + offs_s
        s_mask = sp < num_splits
        prow = ((b.to(tl.int64) * num_splits + sp) * Tq + t) * HQ + h
        lse_s = tl.load(LSEP + prow, mask=s_mask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse_s, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.exp(lse_s - m_safe)  # 0 for empty partials and padding
        alpha = tl.exp(m - m_safe)
        o = tl.load(OP + prow[:, None] * D + offs_d[None, :], mask=s_mask[:, None] & d_mask[None, :], other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o, axis=0)
        l = l * alpha + tl.sum(w, axis=0)
        m = m_new

    has = l > 0.0
    out = acc / tl.where(has, l, 1.0)
    lse = tl.where(has, m + tl.log(tl.where(has, l, 1.0)), float("-inf"))
    o_ptrs = O + b.to(tl.int64) * stride_ob + t * stride_ot + h * stride_oh + offs_d
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=d_mask)
    l_ptrs = LSE + b.to(tl.int64) * stride_lb + t * stride_lt + h * stride_lh + tl.arange(0, 1)
    tl.store(l_ptrs, lse, mask=dblk == 0)


class _Plan(NamedTuple):
    """How a call is cut into programs (shared with :mod:`kernels.triton_attend_quant`)."""

    config: TritonConfig
    block_d: int
    chunks_per_page: int
    chunks_per_split: int
    num_splits: int  # every split gets chunks_per_split chunks (the last may reach past the row)
    m_tiles: int


def _plan_launch(q: Tensor, pool_shape, M: int, config: TritonConfig | None) -> _Plan:
    B, Tq, Hq, D = q.shape
    S, P, Hkv, _ = pool_shape
    if config is None:
        config = choose_config(B, Tq, Hq, Hkv, D, P, M, q.device)
    chunks_per_page = -(-P // config.block_n)
    total_chunks = max(1, M * chunks_per_page)
    chunks_per_split = -(-total_chunks // max(1, config.num_splits))
    m_tiles = -(-(Tq * (Hq // Hkv)) // config.block_m)
    if B and Tq and (B * Hkv > 65535 or m_tiles > 65535):  # CUDA limit on grid dims 1 and 2
        raise ValueError(f"triton_attend_selected: B * Hkv = {B * Hkv} and query tiles = {m_tiles} must be <= 65535")
    return _Plan(config, _next_pow2(max(D, 16)), chunks_per_page, chunks_per_split,
                 -(-total_chunks // chunks_per_split), m_tiles)


def _outputs(q: Tensor, plan: _Plan) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """out, lse and the fp32 split partials (out/lse themselves as placeholders with one split)."""
    B, Tq, Hq, D = q.shape
    out = torch.empty(B, Tq, Hq, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Tq, Hq, dtype=torch.float32, device=q.device)
    if plan.num_splits == 1 or out.numel() == 0:
        return out, lse, out, lse
    op = torch.empty(B, plan.num_splits, Tq, Hq, D, dtype=torch.float32, device=q.device)
    lsep = torch.empty(B, plan.num_splits, Tq, Hq, dtype=torch.float32, device=q.device)
    return out, lse, op, lsep


def _merge(op: Tensor, lsep: Tensor, out: Tensor, lse: Tensor, plan: _Plan) -> None:
    B, Tq, Hq, D = out.shape
    num_splits = plan.num_splits
    block_dr = _merge_block_d(B * Tq * Hq, plan.block_d, _sm_count(out.device))
    block_s = min(64, _next_pow2(num_splits))
    _merge_splits_kernel[(B * Tq * Hq, -(-D // block_dr))](
        op, lsep, out, lse,
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1), lse.stride(2),
        Tq, num_splits,
        HQ=Hq, D=D, BLOCK_DR=block_dr, BLOCK_S=block_s,
        num_warps=4 if block_s * block_dr >= 2048 else 2,
    )


def triton_attend_selected(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
    config: TritonConfig | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~agentctx.kernels.attend_selected.attend_selected` through the paged split-K kernels
    (inputs validated there; k_pages/v_pages need unit stride on D). ``config``: an explicit
    :class:`TritonConfig` (default :func:`choose_config`).
    """
    plan = _plan_launch(q, k_pages.shape, block_table.shape[1], config)
    num_blocks = num_blocks.contiguous()  # the kernel indexes these two with unit stride
    slot_lens = slot_lens.contiguous()
    out, lse, op, lsep = _outputs(q, plan)
    if out.numel() == 0:
        return out, lse
    B, Tq, Hq, D = q.shape
    Hkv = k_pages.shape[2]
    config, num_splits, direct = plan.config, plan.num_splits, plan.num_splits == 1
    use_softcap = bool(softcap)
    _attend_pages_kernel[(num_splits, B * Hkv, plan.m_tiles)](
        q, k_pages, v_pages, block_table, num_blocks, slot_lens,
        out, lse, op, lsep,
        q.stride(0), q.stride(1), q.stride(2),
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        block_table.stride(0), block_table.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1), lse.stride(2),
        Tq, plan.chunks_per_split, num_splits,
        float(scale), float(softcap) if use_softcap else 1.0,
        HQ=Hq, HKV=Hkv, GROUP=Hq // Hkv, D=D, BLOCK_D=plan.block_d, P=k_pages.shape[1],
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, CHUNKS_PER_PAGE=plan.chunks_per_page,
        USE_SOFTCAP=use_softcap, DIRECT_OUT=direct,
        # fp32 inputs would otherwise go through TF32 (~1e-3 error).
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # Triton 3.6's CPU interpreter computes bf16 tl.dot on raw bits; upcast there only.
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if not direct:
        _merge(op, lsep, out, lse, plan)
    return out, lse
