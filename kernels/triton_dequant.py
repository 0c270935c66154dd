"""Triton helpers that read quantised KV tiles (kernels/kv_quant.py), shared by the page kernel over
quantised pages (kernels/triton_attend_quant.py) and the union kernel (kernels/triton_union.py).

One copy of the dequantisation math, so the two kernels cannot drift apart. A caller loads a K or V
tile (fp8 e4m3 or int8) and converts it to the query's dtype, which is exact (e4m3 and |x| <= 127
are exact in bf16/fp16), then lets these helpers apply the float32 scales where they cost least:

* K ``page_head``: one scalar times the score tile; ``token_head``: times the score columns;
  ``channel``: folded into the query (q * scale_d, rounded once to q's dtype; 2^-9 relative in
  bf16, far under int8's step).
* V ``page_head``: the scalar times ``p @ v``; ``channel``: the columns of ``p @ v``;
  ``token_head``: folded into ``p`` before its cast to the dot dtype (the float kernels cast
  ``p`` there too).

Mode 0 is float pages: a plain ``tl.dot``, no scale read, so a kernel compiled with K_MODE = V_MODE = 0
is the float kernel it was (the scale pointers and strides are dead code and compile away).
Scale loads are masked like the K/V loads (``tok < slot_lens``) with 0 elsewhere, and page-level
scales are read only for a chunk with a valid token (``any_tok``), so a garbage scale of an unused
token never meets a zero tile (0 * NaN is NaN). Scale strides are 0 on broadcast axes
(:func:`scale_strides`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .kv_quant import GRANULARITIES, QuantPages
from .triton_attend import INTERPRET

__all__ = ["SCALE_MODE", "FLOAT_MODE", "dot_f16", "scale_strides", "scale_mode", "scores_dequant", "pv_dequant"]

# constexpr codes of the granularities in the kernels; 0 = float pages
FLOAT_MODE = 0
SCALE_MODE = {g: i + 1 for i, g in enumerate(GRANULARITIES)}  # page_head 1, token_head 2, channel 3


def dot_f16(q: torch.Tensor, pages) -> bool:
    """Whether a kernel over fp8 pages runs its dots in fp16 (the query cast once, the e4m3 tiles and
    ``p`` following it) instead of bf16. e4m3 converts to fp16 two values per instruction, and to
    bf16 only through a second, per-value conversion: the fp8 union kernel ran slower than on bf16
    pages on an H100 (BENCHMARKS §3b). fp16 holds every e4m3 value exactly and 3 more mantissa bits
    than bf16; its range (65,504) is far above an attention query's (normed, O(10)). Not for int8
    pages, whose conversion to bf16 is the cheap one (their sm_90 code has 3x the conversions in
    fp16), float pages, the interpreter (whose fp32 upcast stays), or ``AGENTCTX_QUANT_DOT_F16=0``
    (the A/B switch of the benchmarks)."""
    return (isinstance(pages, QuantPages) and pages.data.dtype == torch.float8_e4m3fn
            and q.dtype == torch.bfloat16 and not INTERPRET
            and os.environ.get("AGENTCTX_QUANT_DOT_F16", "1") != "0")


def scale_strides(pages: QuantPages) -> tuple[int, int, int, int]:
    """The scale's strides with 0 on its broadcast (size-1) axes."""
    return tuple(0 if n == 1 else st for n, st in zip(pages.scale.shape, pages.scale.stride()))


def scale_mode(pages) -> int:
    """The constexpr mode of a pool: :data:`FLOAT_MODE` for a float tensor, else its granularity's."""
    return SCALE_MODE[pages.granularity] if isinstance(pages, QuantPages) else FLOAT_MODE


@triton.jit
def scores_dequant(q, k, ks_ptr, tok, offs_d, n_mask, d_mask, any_tok, stride_ksp, stride_ksd,
                   K_MODE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """fp32 (BLOCK_M, BLOCK_N) scores ``q @ (k * scale)^T``; ``k`` (BLOCK_N, BLOCK_D) already in q's
    dtype, ``ks_ptr`` the scales of this page and KV head."""
    if K_MODE == 3:  # channel: scale the query's columns instead of the (larger) K tile
        ks = tl.load(ks_ptr + offs_d * stride_ksd, mask=d_mask & any_tok, other=0.0)
        qk = (q.to(tl.float32) * ks[None, :]).to(q.dtype)
        s = tl.dot(qk, tl.trans(k), input_precision=DOT_PRECISION)
    else:
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if K_MODE == 1:
            s = s * tl.load(ks_ptr, mask=any_tok, other=0.0)
        elif K_MODE == 2:
            s = s * tl.load(ks_ptr + tok * stride_ksp, mask=n_mask, other=0.0)[None, :]
    return s


@triton.jit
def pv_dequant(p, v, vs_ptr, tok, offs_d, n_mask, d_mask, any_tok, stride_vsp, stride_vsd,
               V_MODE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """fp32 (BLOCK_M, BLOCK_D) ``p @ (v * scale)``; ``p`` fp32 probabilities, ``v`` in the dot dtype."""
    if V_MODE == 2:  # token_head: the scale weights p's columns
        vs = tl.load(vs_ptr + tok * stride_vsp, mask=n_mask, other=0.0)
        pv = tl.dot((p * vs[None, :]).to(v.dtype), v, input_precision=DOT_PRECISION)
    else:
        pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        if V_MODE == 1:
            pv = pv * tl.load(vs_ptr, mask=any_tok, other=0.0)
        elif V_MODE == 3:
            pv = pv * tl.load(vs_ptr + offs_d * stride_vsd, mask=d_mask & any_tok, other=0.0)[None, :]
    return pv
