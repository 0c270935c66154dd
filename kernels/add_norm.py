"""A sandwich-norm layer's residual step as one kernel: ``r = x + norm1(h)``, ``y = norm2(r)``.

Gemma 2 / 3 decoder layers normalise each branch's output before adding it to the residual
stream, and normalise the sum again before the next branch (``post_attention_layernorm``, add,
``pre_feedforward_layernorm``; ``post_feedforward_layernorm``, add, the next layer's
``input_layernorm``). As separate kernels that is three launches per step of the stream, six
per layer; :func:`add_norm2` is one. ``norm2`` may be absent (``w2=None``: only ``r``).

Rounding follows transformers' op order, as :func:`kernels.rmsnorm.rms_norm_reference` does:
``norm1(h)`` is rounded to the stream's dtype, the sum is rounded, then ``norm2`` reads the
rounded sum. :func:`add_norm2_reference` is that order in plain PyTorch (bit for bit the
modules and the add it replaces); the kernel differs from it only in the order of its fp32
sums of squares.
"""

from __future__ import annotations

from torch import Tensor

from .rmsnorm import STYLES, rms_norm_reference

__all__ = ["add_norm2", "add_norm2_reference"]


def _validate(x: Tensor, h: Tensor, w1: Tensor, w2: Tensor | None, style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"add_norm2: style must be one of {STYLES}, got {style!r}")
    if x.shape != h.shape or x.dtype != h.dtype or x.device != h.device:
        raise ValueError(f"add_norm2: x and h must match in shape, dtype and device; got {tuple(x.shape)} "
                         f"{x.dtype} {x.device} and {tuple(h.shape)} {h.dtype} {h.device}")
    for name, w in (("w1", w1), ("w2", w2)):
        if w is not None and (w.dim() != 1 or w.shape[0] != x.shape[-1] or w.device != x.device):
            raise ValueError(f"add_norm2: {name} must be ({x.shape[-1]},) on {x.device}, got {tuple(w.shape)} "
                             f"on {w.device}")
    if style == "scale" and any(w is not None and w.dtype != x.dtype for w in (w1, w2)):
        # transformers' "scale" norm returns promote(w, x): the stream's dtype would change.
        raise ValueError("add_norm2: 'scale' style needs weights in the stream's dtype")


def add_norm2_reference(x: Tensor, h: Tensor, w1: Tensor, eps1: float, w2: Tensor | None, eps2: float,
                        style: str) -> tuple[Tensor, Tensor | None]:
    """Plain PyTorch in transformers' op order: (r, y), y None without ``w2``."""
    _validate(x, h, w1, w2, style)
    r = x + rms_norm_reference(h, w1, eps1, style)
    return r, (None if w2 is None else rms_norm_reference(r, w2, eps2, style))


def add_norm2(x: Tensor, h: Tensor, w1: Tensor, eps1: float, w2: Tensor | None, eps2: float, style: str,
              impl: str = "auto") -> tuple[Tensor, Tensor | None]:
    """(r, y) as above. impl: "auto" (Triton on CUDA), "torch" or "triton"."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"add_norm2: impl must be auto, torch or triton, got {impl!r}")
    if impl == "torch" or (impl == "auto" and x.device.type != "cuda"):
        return add_norm2_reference(x, h, w1, eps1, w2, eps2, style)
    _validate(x, h, w1, w2, style)
    from .triton_add_norm import triton_add_norm2  # lazy: triton is optional

    return triton_add_norm2(x, h, w1, eps1, w2, eps2, style == "offset")
