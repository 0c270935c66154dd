"""Triton kernel for :func:`kernels.rmsnorm.rms_norm` (one program per row).

Rows are short (640 for Gemma 3 270M, 4096 for Llama-3-8B; q/k norms 128-256), so a
whole row fits one program's registers: load once, reduce, scale, store. The rows may be
strided over up to three leading dims: the q/k norms get (B, H, T, D) views of the merged
q/k/v product transposed to heads first, which no 2-D view can address, and a copy to
contiguous rows was two extra kernels per layer (36 of a Gemma 3 270M decode step's ~590).
The output is contiguous in ``x``'s logical shape, as the copy's was. Importing
this module requires ``triton``; with ``TRITON_INTERPRET=1`` set before import it
runs on CPU tensors in Triton's interpreter (tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_rmsnorm needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_rms_norm"]


@triton.jit
def _rms_norm_kernel(X, W, Y, S1, S2, stride_x0, stride_x1, stride_x2, stride_y, D, eps,
                     OFFSET: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    # Row index -> (i0, i1, i2) over x's leading dims (sizes ., S1, S2): its strided offset.
    i2 = row % S2
    i1 = (row // S2) % S1
    i0 = row // (S2 * S1)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(X + i0 * stride_x0 + i1 * stride_x1 + i2 * stride_x2 + cols, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / D
    y = x * (1.0 / tl.sqrt(mean_sq + eps))
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if OFFSET:
        out = y * (1.0 + w)
    else:
        # transformers rounds the normalised row to the input dtype before the weight multiply.
        out = w * y.to(X.dtype.element_ty).to(tl.float32)
    tl.store(Y + row * stride_y + cols, out.to(Y.dtype.element_ty), mask=mask)


def triton_rms_norm(x: Tensor, weight: Tensor, eps: float, offset: bool) -> Tensor:
    """See kernels.rmsnorm.rms_norm; inputs are validated there."""
    if x.device.type != "cuda" and not (INTERPRET and x.device.type == "cpu"):
        raise ValueError(f"triton rms_norm needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {x.device}")
    d = x.shape[-1]
    out_dtype = x.dtype if offset else torch.promote_types(weight.dtype, x.dtype)
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)  # rows in x's row-major order
    if x.stride(-1) != 1 or x.dim() > 4:
        x = x.contiguous().view(-1, d)
    sizes, strides = _leading(x)
    n = out.numel() // d if d else 0
    if n == 0:
        return out
    block_d = triton.next_power_of_2(d)
    _rms_norm_kernel[(n,)](
        x, weight.contiguous(), out, sizes[1], sizes[2], *strides, d, d, float(eps),
        OFFSET=offset, BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4,
    )
    return out


def _leading(x: Tensor) -> tuple[list[int], list[int]]:
    """x's leading dims (all but the last, at most three) padded in front to three: sizes, strides."""
    sizes, strides = list(x.shape[:-1]), list(x.stride()[:-1])
    while len(sizes) < 3:
        sizes.insert(0, 1)
        strides.insert(0, 0)
    return sizes, strides
