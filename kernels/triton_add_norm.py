"""Triton kernel for :func:`kernels.add_norm.add_norm2` (one program per row, the row in registers,
as kernels/triton_rmsnorm.py). Importing this module requires ``triton``; with
``TRITON_INTERPRET=1`` set before import it runs on CPU tensors (tests)."""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_add_norm needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_add_norm2"]


@triton.jit
def _add_norm2_kernel(X, H, W1, W2, R, Y, stride_x, stride_h, D, eps1, eps2,
                      HAS_NORM2: tl.constexpr, OFFSET: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    dtype = R.dtype.element_ty
    h = tl.load(H + row * stride_h + cols, mask=mask, other=0.0).to(tl.float32)
    w1 = tl.load(W1 + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    # transformers' RMSNorm of the branch, rounded to the stream's dtype, then the rounded sum.
    n1 = h * (1.0 / tl.sqrt(tl.sum(h * h, axis=0) / D + eps1))
    if OFFSET:
        n1 = (n1 * (1.0 + w1)).to(dtype)
    else:
        n1 = (w1 * n1.to(dtype).to(tl.float32)).to(dtype)
    r = (x + n1.to(tl.float32)).to(dtype)
    tl.store(R + row * D + cols, r, mask=mask)
    if HAS_NORM2:
        w2 = tl.load(W2 + cols, mask=mask, other=0.0).to(tl.float32)
        rf = r.to(tl.float32)
        n2 = rf * (1.0 / tl.sqrt(tl.sum(rf * rf, axis=0) / D + eps2))
        if OFFSET:
            n2 = (n2 * (1.0 + w2)).to(dtype)
        else:
            n2 = (w2 * n2.to(dtype).to(tl.float32)).to(dtype)
        tl.store(Y + row * D + cols, n2, mask=mask)


def triton_add_norm2(x: Tensor, h: Tensor, w1: Tensor, eps1: float, w2: Tensor | None, eps2: float, offset: bool
                     ) -> tuple[Tensor, Tensor | None]:
    """See kernels.add_norm.add_norm2 (inputs validated there)."""
    if x.device.type != "cuda" and not (INTERPRET and x.device.type == "cpu"):
        raise ValueError(f"triton add_norm2 needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {x.device}")
    d = x.shape[-1]
    xs, hs = x.reshape(-1, d), h.reshape(-1, d)
    xs = xs if xs.stride(-1) == 1 else xs.contiguous()
    hs = hs if hs.stride(-1) == 1 else hs.contiguous()
    r = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y = None if w2 is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = xs.shape[0]
    if n == 0:
        return r, y
    block_d = triton.next_power_of_2(d)
    w1c = w1.contiguous()
    _add_norm2_kernel[(n,)](
        xs, hs, w1c, w1c if w2 is None else w2.contiguous(), r, r if y is None else y,
        xs.stride(0), hs.stride(0), d, float(eps1), float(eps2),
        HAS_NORM2=w2 is not None, OFFSET=offset, BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4,
    )
    return r, y
