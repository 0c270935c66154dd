"""Document pages held quantised on the device: fp8 (e4m3) or int8 values plus float32 scales.

``model.kv_dtype`` fp8_e4m3 / int8 makes a replica keep every global layer's pages in the format of
:mod:`kernels.kv_quant` (per layer ``values (S, P, Hkv, D)`` one byte each and ``scales
(S, 1|P, Hkv, 1|D)``, at kv_quant's default granularities: fp8 K and V per token and head, int8 K
per channel and V per token and head), so a document takes half its bf16 bytes (plus 1.6-3 % of
scales) and the decode kernels read them directly, dequantising in registers
(kernels/triton_attend_quant.py, kernels/triton_union.py). ``auto`` and ``bf16`` leave the device
pages in the compute dtype (bf16 then only names the store's form, serving/serve/replica.py).

These are the operations on such a pool that :class:`~agentctx.serving.runner.paged_kv.DocKV` uses:
allocation, writing a prefill chunk (quantised once, when written: chunks are page aligned, so
each page is written, and quantised, exactly once), reading a layer back as float for the paths
that are not the decode hot path, and the store's page unit
(:class:`~agentctx.common.kv_page.QuantKVPage`), both ways, without a dequantise/requantise trip.
"""

from __future__ import annotations

import torch

from agentctx.common.kv_page import QuantKVPage
from agentctx.kernels.kv_quant import (
    DEFAULT_GRANULARITY,
    QuantPages,
    dequantize_pages,
    quantize_pages,
    scale_shape,
)

__all__ = ["DEVICE_KV_DTYPES", "device_kv_dtype", "allocate_pool", "quantize_chunk", "dequantize_pool",
           "layer_pool", "page_unit", "pools_from_units"]

#: model.kv_dtype -> the dtype of quantised device pages (other settings: unquantised pages).
DEVICE_KV_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "int8": torch.int8}


def device_kv_dtype(kv_dtype: str | torch.dtype | None) -> torch.dtype | None:
    """The quantised dtype device pages use for a ``kv_dtype`` setting; None: the compute dtype."""
    if kv_dtype is None or isinstance(kv_dtype, torch.dtype):
        if kv_dtype not in (None, *DEVICE_KV_DTYPES.values()):
            raise ValueError(f"quantised device pages are float8_e4m3fn or int8, got {kv_dtype}")
        return kv_dtype
    if kv_dtype in ("auto", "bf16"):
        return None
    if kv_dtype not in DEVICE_KV_DTYPES:
        raise ValueError(f"kv_dtype must be auto, bf16, fp8_e4m3 or int8, got {kv_dtype!r}")
    return DEVICE_KV_DTYPES[kv_dtype]


def allocate_pool(shape: tuple[int, int, int, int], qdtype: torch.dtype, part: str, device) -> tuple[torch.Tensor,
                                                                                                     torch.Tensor]:
    """Zeroed (values, scales) of one layer's K (``part`` "k") or V pool at the default granularity."""
    scales = torch.zeros(scale_shape(shape, DEFAULT_GRANULARITY[(qdtype, part)]), dtype=torch.float32, device=device)
    return torch.zeros(shape, dtype=qdtype, device=device), scales


def layer_pool(pages: dict[int, torch.Tensor], scales: dict[int, torch.Tensor], layer: int
               ) -> torch.Tensor | QuantPages:
    """One layer's K or V pool as the kernels take it: the float tensor, or QuantPages (values, scales)."""
    s = scales.get(layer)
    return pages[layer] if s is None else QuantPages(pages[layer], s)


def quantize_chunk(values: torch.Tensor, scales: torch.Tensor, first_page: int, x: torch.Tensor, part: str) -> None:
    """Write ``x`` (t, Hkv, D) float tokens from page ``first_page`` on, quantised at the pool's own
    granularity; the tokens past ``t`` in its last page are stored as 0 and kept out of the scales."""
    _, p, h, d = values.shape
    t = x.shape[0]
    n = -(-t // p)
    padded = x.new_zeros(n * p, h, d)
    padded[:t] = x
    lens = (t - torch.arange(n, device=x.device) * p).clamp_(max=p).to(torch.int32)
    gran = QuantPages(values, scales).granularity
    q = quantize_pages(padded.view(n, p, h, d), values.dtype, gran, part=part, slot_lens=lens)
    values[first_page : first_page + n] = q.data
    scales[first_page : first_page + n] = q.scale


def dequantize_pool(values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype,
                    index: slice | torch.Tensor = slice(None)) -> torch.Tensor:
    """Pages ``index`` of a quantised pool as a new float tensor of ``dtype``: a copy, made only by paths
    off the decode hot path, one layer at a time (never the document's whole float KV)."""
    return dequantize_pages(values[index], scales[index], dtype)


def page_unit(k_pages, v_pages, k_scales, v_scales, layers: tuple[int, ...], i: int, dtype: torch.dtype) -> QuantKVPage:
    """The store's unit for page ``i`` of a quantised document: values (L_global, 2, P, Hkv, D) and the
    K and V scales (L_global, 1|P, Hkv, 1|D): the bytes the device holds, as they are."""
    data = torch.stack([torch.stack([k_pages[l][i], v_pages[l][i]]) for l in layers])
    return QuantKVPage(data, torch.stack([k_scales[l][i] for l in layers]),
                       torch.stack([v_scales[l][i] for l in layers]), dtype)


def pools_from_units(units: list, layers: tuple[int, ...], page_size: int, num_tokens: int, qdtype: torch.dtype,
                     device) -> tuple[dict, dict, dict, dict]:
    """(k_pages, v_pages, k_scales, v_scales) of a quantised document from store pages.

    Pages stored in this dtype (``QuantKVPage``) are stacked as they are, no arithmetic; any other
    page (a float tensor, or another quantised dtype) is brought to float and quantised here, page
    by page: the same format, from whatever the store held."""
    if units and all(isinstance(u, QuantKVPage) and u.data.dtype == qdtype for u in units) \
            and len({(tuple(u.k_scale.shape), tuple(u.v_scale.shape)) for u in units}) == 1:
        data = torch.stack([u.data for u in units]).to(device)  # (N, L_global, 2, P, Hkv, D)
        ks = torch.stack([u.k_scale for u in units]).to(device)  # (N, L_global, 1|P, Hkv, 1|D)
        vs = torch.stack([u.v_scale for u in units]).to(device)
        return ({l: data[:, j, 0].contiguous() for j, l in enumerate(layers)},
                {l: data[:, j, 1].contiguous() for j, l in enumerate(layers)},
                {l: ks[:, j].contiguous() for j, l in enumerate(layers)},
                {l: vs[:, j].contiguous() for j, l in enumerate(layers)})
    n = len(units)
    shape = None
    k_pages, v_pages, k_scales, v_scales = {}, {}, {}, {}
    for i, u in enumerate(units):
        page = (u.dequantize(torch.float32) if isinstance(u, QuantKVPage) else u).to(device)  # (L, 2, P, Hkv, D)
        if shape is None:
            shape = (n, *page.shape[2:])
            for l in layers:
                k_pages[l], k_scales[l] = allocate_pool(shape, qdtype, "k", device)
                v_pages[l], v_scales[l] = allocate_pool(shape, qdtype, "v", device)
        valid = min(page_size, num_tokens - i * page_size)
        for j, l in enumerate(layers):
            quantize_chunk(k_pages[l], k_scales[l], i, page[j, 0, :valid], "k")
            quantize_chunk(v_pages[l], v_scales[l], i, page[j, 1, :valid], "v")
    return k_pages, v_pages, k_scales, v_scales
