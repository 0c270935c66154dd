"""Optional int8 page quantization with per-head scales.

Scheme: symmetric absmax per (layer, K/V, head): for a page shaped
``(layers, 2, tokens, kv_heads, head_dim)`` one float32 scale is kept for each
``(layer, kv, head)``, i.e. the max is taken over the token and head_dim axes
(``reduce_axes=(-3, -1)``). ``q = round(x / scale)`` clamped to [-127, 127],
``scale = absmax / 127``.

Accuracy effect (measured by ``tests/store/test_device_cache_quant.py`` on a
Gemma-3-270M-shaped bf16 page, 256 tokens x 256 dims per head): the
per-element error is at most ``scale / 2`` (plus the output dtype's own
rounding). On Gaussian-like heads the relative RMS error is 1.0 % (absmax sits
~4.5 sigma out over 65K values, so the step is ~0.035 sigma), and the softmax of
one query's scores moves by ~0.4 % total variation. A head with one 20x outlier
channel (common for keys in real LLMs) degrades to ~7.5 % RMS overall and ~12 %
on its other channels, because the outlier sets the whole head's scale;
``reduce_axes=(-3,)`` (one scale per channel) avoids that at 256x the scale
storage. Memory halves for bf16 pages (1 byte per element + 4 bytes per head).
Whether that is acceptable for a model must be judged on its outputs; the store
keeps it off unless ``KVStore.connect(quantize=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import InvalidInputError

__all__ = ["QuantizedPage", "quantize_page", "dequantize_page", "error_bound"]

_QMAX = 127.0


@dataclass
class QuantizedPage:
    """int8 values plus float32 scales broadcastable against them."""

    q: torch.Tensor  # int8, the page's shape
    scale: torch.Tensor  # float32, same rank, 1 on the reduced axes
    dtype: torch.dtype  # dtype to dequantize back to

    @property
    def nbytes(self) -> int:
        return self.q.numel() * self.q.element_size() + self.scale.numel() * self.scale.element_size()


def _axes(ndim: int, reduce_axes: tuple[int, ...] | None) -> tuple[int, ...]:
    if ndim == 0:
        return ()
    if reduce_axes is None:
        # Pages are (..., tokens, heads, head_dim): per-head means reduce tokens and head_dim.
        reduce_axes = (-3, -1) if ndim >= 3 else tuple(range(ndim))
    norm = sorted({a % ndim for a in reduce_axes})
    if any(not -ndim <= a < ndim for a in reduce_axes):
        raise InvalidInputError(f"reduce_axes {reduce_axes} out of range for a {ndim}-d page")
    return tuple(norm)


def quantize_page(page: torch.Tensor, reduce_axes: tuple[int, ...] | None = None) -> QuantizedPage:
    """Quantize a floating-point page to int8 with one scale per kept index (per head by default)."""
    if not isinstance(page, torch.Tensor) or not page.is_floating_point():
        raise InvalidInputError("quantize_page needs a floating-point tensor")
    x = page.detach().to(torch.float32)
    if not torch.isfinite(x).all():
        raise InvalidInputError("page contains inf/nan; int8 quantization would corrupt it")
    axes = _axes(x.dim(), reduce_axes)
    amax = x.abs().amax(dim=axes, keepdim=True) if axes and x.numel() else x.abs()
    if x.numel() == 0:
        amax = torch.zeros([1] * x.dim(), dtype=torch.float32)
    # An all-zero head would give scale 0 and NaNs; scale 1 quantizes it to exact zeros.
    scale = torch.where(amax > 0, amax / _QMAX, torch.ones_like(amax))
    q = torch.round(x / scale).clamp_(-_QMAX, _QMAX).to(torch.int8)
    return QuantizedPage(q=q, scale=scale.contiguous(), dtype=page.dtype)


def dequantize_page(qp: QuantizedPage) -> torch.Tensor:
    """Back to the original dtype (a new tensor)."""
    return (qp.q.to(torch.float32) * qp.scale).to(qp.dtype)


def error_bound(qp: QuantizedPage) -> torch.Tensor:
    """Per-element bound on |x - dequantize(quantize(x))| before output-dtype rounding: scale / 2."""
    return (qp.scale / 2).expand_as(qp.q) if qp.q.numel() else qp.scale
