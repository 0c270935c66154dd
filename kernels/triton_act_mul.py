"""Triton kernel for :func:`kernels.act_mul.act_mul`: one program per row block of the
(rows, 2I) gate/up product. Importing this module requires ``triton``; with
``TRITON_INTERPRET=1`` set before import it runs on CPU tensors (tests)."""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_act_mul needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_act_mul"]


@triton.jit
def _act_mul_kernel(GU, O, stride_g, stride_o, I, GELU_TANH: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    g = tl.load(GU + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + row * stride_g + I + cols, mask=mask, other=0.0)
    if GELU_TANH:
        y = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        th = 1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)  # tanh without NaN at saturation
        a = 0.5 * g * (1.0 + th)
    else:
        a = g / (1.0 + tl.exp(-g))
    # PyTorch's rounding: the activation to the input dtype, then the product.
    a = a.to(u.dtype).to(tl.float32)
    tl.store(O + row * stride_o + cols, (a * u.to(tl.float32)).to(O.dtype.element_ty), mask=mask)


def triton_act_mul(gate_up: Tensor, act: str) -> Tensor:
    """See kernels.act_mul.act_mul (inputs validated there)."""
    if gate_up.device.type != "cuda" and not (INTERPRET and gate_up.device.type == "cpu"):
        raise ValueError(f"triton act_mul needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), "
                         f"got {gate_up.device}")
    two_i = gate_up.shape[-1]
    rows = gate_up.reshape(-1, two_i)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    i = two_i // 2
    out = torch.empty(*gate_up.shape[:-1], i, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] == 0 or i == 0:
        return out
    block = min(1024, triton.next_power_of_2(i))
    _act_mul_kernel[(rows.shape[0], triton.cdiv(i, block))](
        rows, out, rows.stride(0), i, i, GELU_TANH=act == "gelu_tanh", BLOCK=block, num_warps=4,
    )
    return out
