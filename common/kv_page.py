"""A quantised KV page as the store keeps it and a device cache may hold it.

The format's arithmetic (scales, granularities, quantisation) is ``kernels.kv_quant``'s; this is the
typed unit that crosses layers: the store's codec (kv_store/codec.py) encodes and decodes it, the
serving runner holds and writes it (serving/runner/paged_kv.py). It lives here, below both, so the
GPU path can use it without importing the store (whose package pulls in Redis).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["QuantKVPage"]


class QuantKVPage(NamedTuple):
    """A quantised store page: ``x[:, 0] ~= data[:, 0].float() * k_scale``, likewise V.

    data: (L_global, 2, P, Hkv, D) float8_e4m3fn or int8. k_scale, v_scale: float32
    (L_global, 1|P, Hkv, 1|D), as ``kernels.kv_quant.quantize_pages`` returns them per part.
    dtype: what :meth:`dequantize` gives by default.
    """

    data: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    dtype: torch.dtype

    def cpu(self) -> "QuantKVPage":
        """The same page on the CPU (as ``Tensor.cpu``: a page held on a GPU, for the store)."""
        return QuantKVPage(self.data.cpu(), self.k_scale.cpu(), self.v_scale.cpu(), self.dtype)

    def dequantize(self, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new (L_global, 2, P, Hkv, D) tensor; the same arithmetic as
        ``kernels.kv_quant.dequantize_pages`` (float32 product, then the cast)."""
        out_dtype = out_dtype or self.dtype
        k = (self.data[:, 0].to(torch.float32) * self.k_scale).to(out_dtype)
        v = (self.data[:, 1].to(torch.float32) * self.v_scale).to(out_dtype)
        return torch.stack([k, v], dim=1)
