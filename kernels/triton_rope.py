"""Triton kernel for :func:`kernels.rope.apply_rope`: q and k of one layer in one launch.

Grid ``(B*T, q_tiles + k_tiles)``: one program takes one token (b, t) and a tile of up
to BLOCK_H heads of either q (the first q_tiles programs of the row) or k (the rest). It
loads the token's cos/sin row once, then each head's two halves, and writes
``(x1*c1 - x2*s1, x2*c2 + x1*s2)`` (``rotate_half(x) = (-x2, x1)``) in fp32, rounded once
to the output dtype. A decode step of Gemma 3 270M (Hq=4, Hkv=1, D=256) is two programs; a
4096-token prefill chunk is 8192.

Strides of B, H and T are arguments, so the transposed ``(B, T, H, D)`` projections that
transformers passes are read in place; outputs get the inputs' layout (``empty_like``), as
transformers' elementwise ops give them. No host syncs and no data-dependent allocations:
the launch can be captured in a CUDA graph. Importing this module requires ``triton``;
with ``TRITON_INTERPRET=1`` set before import it runs on CPU tensors (tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_rope needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_rope"]

# Elements of one half-head tile (BLOCK_H x D/2) per program: a Llama-style layer's 32
# query heads of D=128 fit one program (16 fp32 values per thread and operand at 4 warps).
_MAX_TILE = 2048


@triton.jit
def _rotate_heads(X, Y, sx_h, sy_h, H, h0, c1, c2, s1, s2, cols, cmask,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    heads = h0 + tl.arange(0, BLOCK_H)
    mask = (heads < H)[:, None] & cmask[None, :]
    x_ptr = X + heads[:, None].to(tl.int64) * sx_h + cols[None, :]
    y_ptr = Y + heads[:, None].to(tl.int64) * sy_h + cols[None, :]
    x1 = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + HALF, mask=mask, other=0.0).to(tl.float32)
    y1 = x1 * c1[None, :] - x2 * s1[None, :]
    y2 = x2 * c2[None, :] + x1 * s2[None, :]
    tl.store(y_ptr, y1.to(Y.dtype.element_ty), mask=mask)
    tl.store(y_ptr + HALF, y2.to(Y.dtype.element_ty), mask=mask)


# T changes from call to call (chunk sizes, decode steps): do not compile a variant per
# divisibility class of it.
@triton.jit(do_not_specialize=["T"])
def _rope_kernel(
    Q, K, QO, KO, COS, SIN, T, HQ, HKV, Q_TILES,
    sq_b, sq_t, sq_h, sk_b, sk_t, sk_h,
    sqo_b, sqo_t, sqo_h, sko_b, sko_t, sko_h,
    sc_b, sc_t, ss_b, ss_t,
    HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    b = row // T
    t = row - b * T
    cols = tl.arange(0, BLOCK_HALF)
    cmask = cols < HALF
    # cos/sin halves are loaded separately: transformers' tables repeat one half, but
    # nothing here relies on it.
    cos_row = COS + b * sc_b + t * sc_t
    sin_row = SIN + b * ss_b + t * ss_t
    c1 = tl.load(cos_row + cols, mask=cmask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_row + cols, mask=cmask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_row + HALF + cols, mask=cmask, other=0.0).to(tl.float32)
    if tile < Q_TILES:
        _rotate_heads(Q + b * sq_b + t * sq_t, QO + b * sqo_b + t * sqo_t, sq_h, sqo_h, HQ, tile * BLOCK_H,
                      c1, c2, s1, s2, cols, cmask, HALF, BLOCK_H)
    else:
        _rotate_heads(K + b * sk_b + t * sk_t, KO + b * sko_b + t * sko_t, sk_h, sko_h, HKV,
                      (tile - Q_TILES) * BLOCK_H, c1, c2, s1, s2, cols, cmask, HALF, BLOCK_H)


def _unit_last(x: Tensor) -> Tensor:
    # The kernel reads D with unit stride; B/H/T may be strided.
    return x if x.stride(-1) == 1 else x.contiguous()


def triton_rope(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, out: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """See kernels.rope.apply_rope; inputs are validated there.

    out: optional (q_out, k_out) to write, shaped and typed like q and k with unit stride in D
    (the tests pass poisoned buffers); by default new tensors in q's and k's layout.
    """
    if q.device.type != "cuda" and not (INTERPRET and q.device.type == "cpu"):
        raise ValueError(f"triton rope needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {q.device}")
    q, k, cos, sin = _unit_last(q), _unit_last(k), _unit_last(cos), _unit_last(sin)
    if out is None:
        # Like q's and k's layout when they are dense (transformers' outputs have it too).
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    else:
        q_out, k_out = out
        for x, o in ((q, q_out), (k, k_out)):
            if o.shape != x.shape or o.dtype != x.dtype or o.device != x.device or (o.numel() and o.stride(-1) != 1):
                raise ValueError(f"triton rope: out {tuple(o.shape)} {o.dtype} {o.device} strides {o.stride()} "
                                 f"does not fit input {tuple(x.shape)} {x.dtype} {x.device} (unit stride in D)")
    b, hq, t, d = q.shape
    hkv = k.shape[1]
    if q_out.numel() == 0 and k_out.numel() == 0:
        return q_out, k_out
    half = d // 2
    block_half = triton.next_power_of_2(half)
    block_h = max(1, min(triton.next_power_of_2(max(hq, hkv)), _MAX_TILE // block_half))
    q_tiles, k_tiles = triton.cdiv(hq, block_h), triton.cdiv(hkv, block_h)
    # A batch of one position table serves every row: stride 0 broadcasts it.
    cos_b = cos.stride(0) if cos.shape[0] > 1 else 0
    sin_b = sin.stride(0) if sin.shape[0] > 1 else 0
    _rope_kernel[(b * t, q_tiles + k_tiles)](
        q, k, q_out, k_out, cos, sin, t, hq, hkv, q_tiles,
        q.stride(0), q.stride(2), q.stride(1), k.stride(0), k.stride(2), k.stride(1),
        q_out.stride(0), q_out.stride(2), q_out.stride(1), k_out.stride(0), k_out.stride(2), k_out.stride(1),
        cos_b, cos.stride(1), sin_b, sin.stride(1),
        HALF=half, BLOCK_H=block_h, BLOCK_HALF=block_half, num_warps=4,
    )
    return q_out, k_out
