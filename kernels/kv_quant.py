"""Quantised KV pages: fp8 (e4m3) or int8 values with float32 scales, as the page kernel reads them.

A page pool of one layer's keys or values ``(S, P, Hkv, D)`` is held as ``data`` of the same shape
in ``torch.float8_e4m3fn`` or ``torch.int8`` plus a float32 ``scale`` broadcastable against it
(1 on the reduced axes), so ``x ~= data.float() * scale``. Symmetric absmax: ``scale = absmax /
QMAX`` (448 for e4m3, 127 for int8). The granularity is named by which axes keep a scale:

=============  ==================  ======================================  =====================
granularity    scale shape         what one scale covers                   scale bytes / value B
=============  ==================  ======================================  =====================
``page_head``  ``(S, 1, Hkv, 1)``  one page of one head (P x D values)     4 / (P*D)
``token_head`` ``(S, P, Hkv, 1)``  one token of one head (D values)        4 / D
``channel``    ``(S, 1, Hkv, D)``  one channel of one head in one page     4 / P
=============  ==================  ======================================  =====================

Defaults, measured by ``bench/experiments/kv_quant_error.py`` (CPU, float32 reference attention;
4K tokens in 256-token pages, Gaussian heads with one 20x outlier channel in the keys; relative
RMS error against the unquantised tensors; "out" is the attention output of 4 decode queries;
the bf16 row puts it beside a plain bf16 cache):

=====  =======================  ======================  ======================
dtype  K / V scales             Gemma 3 270M K, V, out  Llama 3 8B K, V, out
=====  =======================  ======================  ======================
bf16   (a bf16 cache)           0.17  0.17   0.77       0.17  0.17   1.28
fp8    page_head / page_head    2.66  2.64   8.40       2.64  2.65   7.54
fp8    token_head / token_head  1.65  2.61   3.59       1.29  2.57   3.31   default
fp8    channel / channel        2.64  2.61   8.36       2.63  2.61   7.31
int8   page_head / page_head    8.53  1.02  12.57       6.78  0.98  10.00
int8   token_head / token_head  2.85  0.70   9.14       2.24  0.65   9.45
int8   channel / channel        0.68  0.70   1.26       0.69  0.70   1.21
int8   channel / token_head     0.68  0.70   1.26       0.69  0.65   1.19   default
=====  =======================  ======================  ======================

(%, Gemma: Hq 4, Hkv 1, D 256; Llama: Hq 32, Hkv 8, D 128.) The output error comes mostly from
the keys (through the outlier channel's share of the scores): with only K quantised, fp8
page_head gives 7-8 %, token_head 2-2.5 %; int8 token_head 9 %, channel 1 %.

* Keys, fp8: ``token_head``. e4m3 keeps ~3 significant bits at any magnitude, so the granularity
  hardly changes the small channels' error (2.6 %); what a per-token scale buys is that each
  token's largest element, the outlier channel that dominates the scores, is stored exactly.
* Keys, int8: ``channel``. With one scale per token or page the 20x channel sets the step for all
  channels and the others lose most of their bits (KIVI's finding: quantise keys per channel).
* Values: ``token_head`` for both. int8: 0.70 % against 1.0 % per page; fp8: no difference, but
  the same layout as the keys and a scale that never changes when a page is appended to.
  A per-token scale costs 4 bytes per D values (1.6 % at D = 256, 3 % at D = 128).
* int8 with these defaults is as accurate as a bf16 cache is on this data (out 1.2 % vs fp32,
  bf16 0.8-1.3 %); fp8 is about 3x worse (3.3-3.6 %). Both read half the bytes of bf16, plus
  the scales (1.6-3 % more).

Page-level scales (``page_head``, ``channel``) are fixed once a page is full; a page still being
appended to would have to be requantised, per-token scales never are. Tokens past ``slot_lens`` may
hold garbage (even NaN); ``quantize_pages(..., slot_lens=...)`` stores 0 there and leaves them out
of the absmax. An all-zero head gets scale 0 and dequantises to exact zeros. Valid tokens must be
finite (checking that would cost a device sync per call).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "QuantPages", "KV_DTYPES", "GRANULARITIES", "QMAX", "DEFAULT_GRANULARITY",
    "scale_shape", "quantize_pages", "dequantize_pages",
]

KV_DTYPES = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
QMAX = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}
GRANULARITIES = ("page_head", "token_head", "channel")
# (dtype, "k" | "v") -> granularity; see the module docstring for the measurement.
DEFAULT_GRANULARITY = {
    (torch.float8_e4m3fn, "k"): "token_head",
    (torch.float8_e4m3fn, "v"): "token_head",
    (torch.int8, "k"): "channel",
    (torch.int8, "v"): "token_head",
}


def scale_shape(shape: tuple[int, ...] | torch.Size, granularity: str) -> tuple[int, int, int, int]:
    """Shape of the scale tensor for a ``(S, P, Hkv, D)`` pool at ``granularity``."""
    S, P, Hkv, D = shape
    if granularity == "page_head":
        return (S, 1, Hkv, 1)
    if granularity == "token_head":
        return (S, P, Hkv, 1)
    if granularity == "channel":
        return (S, 1, Hkv, D)
    raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")


class QuantPages(NamedTuple):
    """A quantised page pool of one layer's keys or values; unpacks as ``(data, scale)``.

    data: (S, P, Hkv, D) float8_e4m3fn or int8. scale: float32 of :func:`scale_shape`.
    """

    data: Tensor
    scale: Tensor

    @property
    def granularity(self) -> str:
        """Read back from the scale's shape (``P == 1`` or ``D == 1`` pools are ambiguous: the
        first matching name wins, which stores and computes the same thing)."""
        for g in GRANULARITIES:
            if tuple(self.scale.shape) == scale_shape(self.data.shape, g):
                return g
        raise ValueError(f"scale shape {tuple(self.scale.shape)} fits no granularity of pool "
                         f"{tuple(self.data.shape)}")

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()

    def dequantize(self, out_dtype: torch.dtype = torch.float32) -> Tensor:
        return dequantize_pages(self.data, self.scale, out_dtype)

    def check(self, name: str = "pages") -> str:
        """Raise ValueError unless the pair is a valid pool; returns its granularity."""
        if not isinstance(self.data, Tensor) or not isinstance(self.scale, Tensor):
            raise ValueError(f"{name}: data and scale must be torch.Tensors")
        if self.data.dim() != 4:
            raise ValueError(f"{name}: data must be (S, P, Hkv, D), got shape {tuple(self.data.shape)}")
        if self.data.dtype not in QMAX:
            raise ValueError(f"{name}: data dtype must be float8_e4m3fn or int8, got {self.data.dtype}")
        if self.scale.dtype != torch.float32:
            raise ValueError(f"{name}: scale must be float32, got {self.scale.dtype}")
        if self.scale.device != self.data.device:
            raise ValueError(f"{name}: scale is on {self.scale.device}, data on {self.data.device}")
        try:
            return self.granularity
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, str):
        if dtype not in KV_DTYPES:
            raise ValueError(f"dtype must be one of {tuple(KV_DTYPES)}, got {dtype!r}")
        return KV_DTYPES[dtype]
    if dtype not in QMAX:
        raise ValueError(f"dtype must be torch.float8_e4m3fn or torch.int8, got {dtype}")
    return dtype


def quantize_pages(
    pages: Tensor,
    dtype: str | torch.dtype = "fp8",
    granularity: str | None = None,
    *,
    part: str = "k",
    slot_lens: Tensor | None = None,
) -> QuantPages:
    """Quantise a ``(S, P, Hkv, D)`` pool of keys or values (any float dtype).

    Args:
        dtype: "fp8" / "int8" or the torch dtype.
        granularity: one of :data:`GRANULARITIES`; None takes :data:`DEFAULT_GRANULARITY` for
            ``(dtype, part)``.
        part: "k" or "v", only for the default granularity.
        slot_lens: optional (S,) valid tokens per slot; tokens past them are stored as 0 and kept
            out of the scales, whatever they hold.

    Returns:
        :class:`QuantPages` ``(data, scale)`` on the pool's device.
    """
    if not isinstance(pages, Tensor) or pages.dim() != 4 or not pages.is_floating_point():
        raise ValueError(f"quantize_pages: need a floating (S, P, Hkv, D) tensor, got {getattr(pages, 'shape', pages)}")
    qdtype = _as_dtype(dtype)
    if part not in ("k", "v"):
        raise ValueError(f"quantize_pages: part must be 'k' or 'v', got {part!r}")
    granularity = granularity or DEFAULT_GRANULARITY[(qdtype, part)]
    S, P, Hkv, D = pages.shape
    target = scale_shape(pages.shape, granularity)
    x = pages.to(torch.float32)
    if slot_lens is not None:
        if slot_lens.shape != (S,):
            raise ValueError(f"quantize_pages: slot_lens must be (S={S},), got {tuple(slot_lens.shape)}")
        valid = torch.arange(P, device=x.device)[None, :] < slot_lens.to(x.device).long()[:, None]
        # where, not a multiply: NaN * 0 is NaN.
        x = torch.where(valid[:, :, None, None], x, 0.0)
    axes = tuple(i for i in range(4) if target[i] == 1 and pages.shape[i] != 1)
    amax = x.abs().amax(dim=axes, keepdim=True) if axes and x.numel() else x.abs()
    qmax = QMAX[qdtype]
    scale = (amax / qmax).reshape(target).contiguous()
    # An all-zero head has scale 0: divide by 1 there so it stores zeros, not NaN.
    y = x / torch.where(scale > 0, scale, 1.0)
    if qdtype == torch.int8:
        y = torch.round(y)
    # Rounding can step just past QMAX; e4m3fn has no inf, so clamp before the cast.
    data = y.clamp_(-qmax, qmax).to(qdtype)
    return QuantPages(data, scale)


def dequantize_pages(data: Tensor, scale: Tensor, out_dtype: torch.dtype = torch.float32) -> Tensor:
    """The plain-PyTorch reference: ``(data.float() * scale).to(out_dtype)``, a new tensor."""
    return (data.to(torch.float32) * scale).to(out_dtype)
