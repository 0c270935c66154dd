"""Triton kernel of :func:`kernels.union_attend.attend_union`: the union of many rows' plans, each
page read once.

Grid (num_splits, Hkv, m_tiles). A program owns one KV head and a tile of ``BLOCK_M`` flattened
(row, head-in-group) query rows, as the page kernel does (kernels/triton_attend.py), and one
split of the union's chunks (``BLOCK_N`` tokens of a page; the split sizes come from
``union_len`` on the device, so a captured graph serves any union). For each chunk it loads the
page's bit set of rows and K and V once, and scores them against every row of the tile, the rows
that did not select the page masked to -inf. Every union page has a row that selected it, so no
chunk is skipped: a branch around the loads (to skip pages no row of a tile selected) kept Triton
from pipelining them and ran at half the copy bandwidth on an H100 (0.64 ms per layer at 16
agents and 1M tokens against a ~0.3 ms floor). Each program writes a normalised fp32 partial and
its log-sum-exp; the page kernel's split merge combines them exactly.

Quantised pages (kernels/kv_quant.py: fp8 e4m3 or int8 values with float32 scales at any
granularity) take the same loop with ``K_MODE``/``V_MODE`` > 0: the tiles are loaded at one byte a
value and dequantised in registers by the helpers the quantised page kernel uses
(kernels/triton_dequant.py). With both modes 0 (float pages) the scale arguments are dead code and
the kernel compiles to the float kernel it was.
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_union needs the 'triton' package") from exc

from .kv_quant import QuantPages
from .triton_attend import INTERPRET, _merge_splits_kernel
from .triton_config import _merge_block_d, _next_pow2, _sm_count
from .triton_dequant import dot_f16, pv_dequant, scale_mode, scale_strides, scores_dequant

__all__ = ["triton_attend_union", "union_splits"]


@triton.jit(do_not_specialize=["R", "num_splits"])
def _union_kernel(
    Q, K, V, KS, VS, UNION, ULEN, BITS, SL, OP, LSEP,
    stride_qr, stride_qh,
    stride_ks, stride_kp, stride_kh,
    stride_vs, stride_vp, stride_vh,
    stride_kss, stride_ksp, stride_ksh, stride_ksd,
    stride_vss, stride_vsp, stride_vsh, stride_vsd,
    R, num_splits, qk_scale, softcap,
    HQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, P: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_PER_PAGE: tl.constexpr,
    K_MODE: tl.constexpr, V_MODE: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, DOT_F16: tl.constexpr,
):
    split = tl.program_id(0)
    kvh = tl.program_id(1)
    mt = tl.program_id(2)
    rows = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    r = rows // GROUP  # the decode row (agent) of each query row
    h = kvh * GROUP + rows % GROUP
    row_mask = rows < R * GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + r[:, None] * stride_qr + h[:, None] * stride_qh + offs_d[None, :],
                mask=row_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)
    if DOT_F16:  # see kernels.triton_dequant.dot_f16
        q = q.to(tl.float16)
    r64 = r.to(tl.int64)

    total = tl.load(ULEN) * CHUNKS_PER_PAGE
    per = tl.cdiv(total, num_splits)
    c_start = split * per
    c_end = tl.minimum(c_start + per, total)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # log2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for c in range(c_start, c_end):
        u = c // CHUNKS_PER_PAGE
        sub = c % CHUNKS_PER_PAGE
        bits = tl.load(BITS + u)
        sel = (((bits >> r64) & 1) != 0) & row_mask
        slot = tl.load(UNION + u).to(tl.int64)
        slen = tl.load(SL + slot)
        tok = sub * BLOCK_N + offs_n
        n_mask = (tok < slen) & (tok < P)
        any_tok = sub * BLOCK_N < slen  # a page-level scale is read only for a chunk with tokens
        kv_mask = n_mask[:, None] & d_mask[None, :]
        # In q's dtype: a no-op for float pages (an fp32 upcast in the interpreter), exact for fp8/int8.
        k = tl.load(K + slot * stride_ks + tok[:, None] * stride_kp + kvh * stride_kh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(q.dtype)
        s = scores_dequant(q, k, KS + slot * stride_kss + kvh * stride_ksh, tok, offs_d, n_mask, d_mask, any_tok,
                           stride_ksp, stride_ksd, K_MODE, DOT_PRECISION)
        if USE_SOFTCAP:
            x = s * (qk_scale / softcap)
            th = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # tanh without NaN at saturation
            s = th * (softcap * 1.4426950408889634)
        else:
            s = s * (qk_scale * 1.4426950408889634)
        s = tl.where(sel[:, None] & n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + slot * stride_vs + tok[:, None] * stride_vp + kvh * stride_vh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(q.dtype)
        acc = acc * alpha[:, None] + pv_dequant(p, v, VS + slot * stride_vss + kvh * stride_vsh, tok, offs_d, n_mask,
                                                d_mask, any_tok, stride_vsp, stride_vsd, V_MODE, DOT_PRECISION)
        m_i = m_new

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    # Partials (num_splits, R, HQ, D) / (num_splits, R, HQ): _merge_splits_kernel's layout with B = 1.
    prow = (split * R + r).to(tl.int64) * HQ + h
    tl.store(OP + prow[:, None] * D + offs_d[None, :], out, mask=row_mask[:, None] & d_mask[None, :])
    tl.store(LSEP + prow, lse, mask=row_mask)


def _tiles(rows: int) -> tuple[int, int]:
    block_m = 16 if rows <= 16 else (32 if rows <= 32 else 64)  # tl.dot needs M >= 16
    return block_m, -(-rows // block_m)


def union_splits(r: int, hq: int, hkv: int, d: int, p: int, max_pages: int, device: torch.device) -> int:
    """Programs along the union: ~4 per SM over the grid, never fewer than ~128 tokens each, for a
    union as large as ``max_pages`` (a smaller union leaves the last programs empty)."""
    block_m, m_tiles = _tiles(r * (hq // hkv))
    block_n = _block_n(d, block_m, p)
    chunks = max(1, max_pages * -(-p // block_n))
    target = 4 * _sm_count(device)
    return max(1, min(-(-target // (hkv * m_tiles)), -(-chunks // max(1, 128 // block_n)), 1024))


def _block_n(d: int, block_m: int, p: int, fp8: bool = False) -> int:
    """Tokens per chunk. fp8 pages take twice the float rule's, the bytes of a bf16 tile: on an
    H100, 16 rows, Llama-8B heads at 128K 192 against 266 us, Gemma heads at 1M 328 against 347 us
    (bench/experiments/union_sweep.py --kv-dtype fp8; bf16 pages 183 / 367 us). int8 keeps the
    float rule: unmeasured, and its Gemma-head kernel already spills at 32."""
    block_d = _next_pow2(max(d, 16))
    block_n = 32 if (block_d >= 256 or block_m >= 64) else 64
    if fp8:
        block_n *= 2
    return max(16, min(block_n, _next_pow2(p)))


def _operands(pages: Tensor | QuantPages) -> tuple[Tensor, Tensor, tuple[int, int, int, int], int]:
    """(values, scales, scale strides, constexpr mode) of a float or quantised pool; a float pool
    passes its own tensor as the (never read) scale pointer."""
    if isinstance(pages, QuantPages):
        return pages.data, pages.scale, scale_strides(pages), scale_mode(pages)
    return pages, pages, (0, 0, 0, 0), scale_mode(pages)


def triton_attend_union(q: Tensor, k_pages: Tensor | QuantPages, v_pages: Tensor | QuantPages, union: Tensor,
                        union_len: Tensor, row_bits: Tensor, slot_lens: Tensor, scale: float,
                        softcap: float | None = None, num_splits: int | None = None, block_n: int | None = None,
                        num_warps: int | None = None, num_stages: int = 3) -> tuple[Tensor, Tensor]:
    """See kernels.union_attend.attend_union; block_n / num_warps / num_stages override the launch
    rule (sweeps: bench/experiments/union_sweep.py). fp8 pools take twice the float rule's tokens
    per tile (the same bytes)."""
    if q.device.type != "cuda" and not (INTERPRET and q.device.type == "cpu"):
        raise RuntimeError(f"attend_union(impl='triton'): tensors are on {q.device}; Triton needs CUDA "
                           "(or TRITON_INTERPRET=1 set before kernels.triton_union is imported)")
    kd, ks, ks_strides, k_mode = _operands(k_pages)
    vd, vs, vs_strides, v_mode = _operands(v_pages)
    r, hq, d = q.shape
    _, p, hkv, _ = kd.shape
    group = hq // hkv
    block_m, m_tiles = _tiles(r * group)
    block_d = _next_pow2(max(d, 16))
    block_n = block_n or _block_n(d, block_m, p, fp8=kd.dtype == torch.float8_e4m3fn)
    if num_warps is None:
        # 4 warps: on an H100, 16 rows at 1M tokens (Gemma heads) 357 us (87% of the copy
        # bandwidth) against 523 us with 8; Llama-8B heads at 128K 179 against 246 us
        # (bench/experiments/union_sweep.py). block_n 64 and 2-4 stages were no faster.
        num_warps = 4
    if num_splits is None:
        num_splits = union_splits(r, hq, hkv, d, p, union.numel(), q.device)
    out = torch.empty(1, r, hq, d, dtype=q.dtype, device=q.device)
    lse = torch.empty(1, r, hq, dtype=torch.float32, device=q.device)
    if r == 0:
        return out[0], lse[0]
    op = torch.empty(num_splits, r, hq, d, dtype=torch.float32, device=q.device)
    lsep = torch.empty(num_splits, r, hq, dtype=torch.float32, device=q.device)
    use_softcap = bool(softcap)
    _union_kernel[(num_splits, hkv, m_tiles)](
        q, kd, vd, ks, vs, union, union_len, row_bits, slot_lens, op, lsep,
        q.stride(0), q.stride(1),
        kd.stride(0), kd.stride(1), kd.stride(2),
        vd.stride(0), vd.stride(1), vd.stride(2),
        *ks_strides, *vs_strides,
        r, num_splits, float(scale), float(softcap) if use_softcap else 1.0,
        HQ=hq, GROUP=group, D=d, BLOCK_D=block_d, P=p, BLOCK_M=block_m, BLOCK_N=block_n,
        CHUNKS_PER_PAGE=-(-p // block_n), K_MODE=k_mode, V_MODE=v_mode,
        USE_SOFTCAP=use_softcap, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16, DOT_F16=dot_f16(q, k_pages),
        num_warps=num_warps, num_stages=num_stages,
    )
    block_dr = _merge_block_d(r * hq, block_d, _sm_count(q.device))
    block_s = min(64, _next_pow2(num_splits))
    _merge_splits_kernel[(r * hq, -(-d // block_dr))](
        op, lsep, out, lse,
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1), lse.stride(2),
        r, num_splits,
        HQ=hq, D=d, BLOCK_DR=block_dr, BLOCK_S=block_s,
        num_warps=4 if block_s * block_dr >= 2048 else 2,
    )
    return out[0], lse[0]
