"""RMSNorm of transformers' decoders, as one kernel per call.

transformers' RMSNorm modules run as 8-10 small kernels each (upcast, pow, mean,
add, rsqrt, mul, weight upcast, offset, mul, downcast). A Gemma 3 270M forward
calls 109 of them, so on a GPU about half of a replayed query forward's ~2000
kernel launches are norms. :func:`rms_norm` does one call in one Triton kernel.

Two weight conventions exist, and they round differently in half precision:

* ``"offset"`` (Gemma): ``(norm(x.float()) * (1 + w.float())).to(x.dtype)``
* ``"scale"`` (Llama, Qwen2/3, ...): ``w * norm(x.float()).to(x.dtype)``, whose dtype is
  ``promote(w.dtype, x.dtype)``

where ``norm(y) = y * rsqrt(mean(y**2, -1) + eps)``. :func:`rms_norm_reference` is the
plain-PyTorch ground truth, written in transformers' op order, so on one device it
equals the modules bit for bit; the Triton kernel differs from it only in the order
of the fp32 sum (tests/kernels/_rmsnorm_cases.py states the tolerance per dtype).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rms_norm", "rms_norm_reference", "STYLES"]

STYLES = ("offset", "scale")


def _validate(x: Tensor, weight: Tensor, eps: float, style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"rms_norm: style must be one of {STYLES}, got {style!r}")
    if weight.dim() != 1 or x.dim() == 0 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"rms_norm: weight must be (D,) with D = x.shape[-1]; got x {tuple(x.shape)}, weight {tuple(weight.shape)}"
        )
    if not x.is_floating_point() or not weight.is_floating_point():
        raise ValueError(f"rms_norm: x and weight must be floating point, got {x.dtype} and {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"rms_norm: x is on {x.device} but weight is on {weight.device}")
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be >= 0, got {eps}")


def rms_norm_reference(x: Tensor, weight: Tensor, eps: float, style: str) -> Tensor:
    """Plain PyTorch, in transformers' op order."""
    _validate(x, weight, eps, style)
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    if style == "offset":
        return (y * (1.0 + weight.float())).type_as(x)
    return weight * y.to(x.dtype)


def rms_norm(x: Tensor, weight: Tensor, eps: float, style: str, impl: str = "auto") -> Tensor:
    """RMSNorm over the last dim. impl: "auto" (Triton on CUDA, else torch), "torch", "triton"."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"rms_norm: impl must be auto, torch or triton, got {impl!r}")
    if impl == "torch" or (impl == "auto" and x.device.type != "cuda"):
        return rms_norm_reference(x, weight, eps, style)
    _validate(x, weight, eps, style)
    from .triton_rmsnorm import triton_rms_norm  # lazy: triton is optional

    return triton_rms_norm(x, weight, eps, style == "offset")
