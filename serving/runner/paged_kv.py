"""KV state of one prefilled document, in pages, plus the private tail of one query.

Global-attention layers keep the whole document as pages of P tokens (keys stored
after RoPE, at their true positions), laid out so that page i of layer l is
``k_pages[l][i]`` with shape (P, Hkv, D). Sliding-window layers keep only the last
W tokens of the document: that is all any later token can see in those layers.

The page tensor of the store (one content-addressed unit) stacks every global
layer's K and V for one page: (L_global, 2, P, Hkv, D).

With ``model.kv_dtype`` fp8_e4m3 or int8 the pages are held quantised (values one byte each plus
float32 scales per layer, ``k_scales`` / ``v_scales``; serving/runner/quant_kv.py) and the
decode kernels read them as they are; the store's unit is then a ``QuantKVPage`` of the same bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from agentctx.common.kv_page import QuantKVPage
from agentctx.kernels.kv_quant import QuantPages
from agentctx.serving.runner.quant_kv import (
    allocate_pool,
    dequantize_pool,
    layer_pool,
    page_unit,
    pools_from_units,
    quantize_chunk,
)

__all__ = ["LayerLayout", "DocKV", "QueryTail"]


@dataclass(frozen=True)
class LayerLayout:
    """Which decoder layers are paged (global) and which keep a window (sliding)."""

    num_layers: int
    global_layers: tuple[int, ...]
    sliding_layers: tuple[int, ...]
    window: int | None  # sliding window W in tokens (None when there are no sliding layers)
    num_kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config) -> "LayerLayout":
        n = config.num_hidden_layers
        types = list(getattr(config, "layer_types", None) or ["full_attention"] * n)
        window = getattr(config, "sliding_window", None)
        # A model may name sliding layers but disable them (Qwen2 use_sliding_window=False).
        if getattr(config, "use_sliding_window", True) is False:
            window = None
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention" and window)
        global_ = tuple(i for i in range(n) if i not in sliding)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(n, global_, sliding, window if sliding else None, config.num_key_value_heads, head_dim)

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """Bytes of paged KV values per document token (global layers only; quantised pages' scales,
        1.6-3 % more, are left out)."""
        return 2 * len(self.global_layers) * self.num_kv_heads * self.head_dim * dtype.itemsize


@dataclass
class DocKV:
    """A document's KV: pages for global layers, a trailing window for sliding layers.

    k_pages[l], v_pages[l]: (num_pages, P, Hkv, D) for each global layer l, in the compute dtype, or
    quantised (fp8 e4m3 / int8) with k_scales[l], v_scales[l] float32 (num_pages, 1|P, Hkv, 1|D)
    (serving/runner/quant_kv.py); ``pool(layer)`` gives them as the kernels take them.
    window_k[l], window_v[l]: (Wt, Hkv, D) the last Wt <= W tokens, positions window_pos (Wt,);
    always in the compute dtype (a window is small).
    """

    layout: LayerLayout
    page_size: int
    num_tokens: int
    k_pages: dict[int, torch.Tensor]
    v_pages: dict[int, torch.Tensor]
    k_scales: dict[int, torch.Tensor] = field(default_factory=dict)  # empty: float pages
    v_scales: dict[int, torch.Tensor] = field(default_factory=dict)
    compute_dtype: torch.dtype | None = None  # what quantised pages dequantise to (None: the pages' dtype)
    window_k: dict[int, torch.Tensor] = field(default_factory=dict)
    window_v: dict[int, torch.Tensor] = field(default_factory=dict)
    window_pos: torch.Tensor | None = None
    last_logits: torch.Tensor | None = None  # (vocab,) logits after the final document token
    token_ids: list[int] | None = None  # the document's tokens (for copy-constrained decoding)
    # Static query buffers and CUDA graphs by block-table width (serving.runner.static_query); they
    # live and die with the document.
    query_slots: dict = field(default_factory=dict, repr=False, compare=False)
    # Static decode rows of many queries by table width (serving.runner.batch_slots), likewise.
    batch_slots: dict = field(default_factory=dict, repr=False, compare=False)
    # Query slots held by one long prompt each, by (table width, capacity) (ModelRunner.long_slots_for).
    long_slots: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_pages(self) -> int:
        return -(-self.num_tokens // self.page_size)

    @functools.cached_property
    def all_pages(self) -> tuple[int, ...]:
        """Every page index: the plan of a dense request (the token count never changes)."""
        return tuple(range(self.num_pages))

    @property
    def last_page_len(self) -> int:
        return self.num_tokens - (self.num_pages - 1) * self.page_size

    @property
    def quantized(self) -> bool:
        return bool(self.k_scales)

    @property
    def kv_dtype(self) -> torch.dtype:
        """The dtype of the stored page values (float8_e4m3fn / int8 when quantised)."""
        return next(iter(self.k_pages.values())).dtype if self.k_pages else self.float_dtype

    @property
    def float_dtype(self) -> torch.dtype:
        """The dtype attention computes in, and what quantised pages are dequantised to."""
        if self.compute_dtype is not None:
            return self.compute_dtype
        return next(iter(self.k_pages.values())).dtype if self.k_pages else torch.float32

    def pool(self, layer: int) -> tuple[torch.Tensor | QuantPages, torch.Tensor | QuantPages]:
        """One global layer's K and V pools as the page kernels take them (float tensors or QuantPages)."""
        return layer_pool(self.k_pages, self.k_scales, layer), layer_pool(self.v_pages, self.v_scales, layer)

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(num_pages * P, Hkv, D) K and V of one global layer, token after token. Float pages: views
        (pages are contiguous, so a run of whole pages is a slice, not a gather; prefill writes
        through them). Quantised pages: a float copy of this one layer, dequantised on demand, for
        the paths that are not the decode hot path (the CPU every-page read, eager every-page
        decode groups); the caller drops it after the layer."""
        if self.quantized:
            return tuple(dequantize_pool(d, s, self.float_dtype).flatten(0, 1)
                         for d, s in ((self.k_pages[layer], self.k_scales[layer]),
                                      (self.v_pages[layer], self.v_scales[layer])))
        k, v = self.k_pages[layer], self.v_pages[layer]
        return k.view(-1, *k.shape[2:]), v.view(-1, *v.shape[2:])

    def gather(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pages ``index`` (a long tensor of slots, any shape) of one layer, float: (*index.shape, P, Hkv, D)."""
        if self.quantized:
            return (dequantize_pool(self.k_pages[layer], self.k_scales[layer], self.float_dtype, index),
                    dequantize_pool(self.v_pages[layer], self.v_scales[layer], self.float_dtype, index))
        return self.k_pages[layer][index], self.v_pages[layer][index]

    def prefix(self, layer: int, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``num_tokens`` (whole pages) of one layer, float (num_tokens, Hkv, D): views of
        float pages; for quantised ones a dequantised copy of those pages only (a prefill chunk's
        dense read of the pages before it: one layer's prefix at a time, never the document)."""
        if not self.quantized:
            k, v = self.flat(layer)
            return k[:num_tokens], v[:num_tokens]
        n = -(-num_tokens // self.page_size)
        k, v = self.gather(layer, slice(0, n))
        return k.flatten(0, 1)[:num_tokens], v.flatten(0, 1)[:num_tokens]

    def write_chunk(self, layer: int, first_page: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write a prefill chunk's K and V (t, Hkv, D) of one layer from page ``first_page`` on;
        quantised pages are quantised here, page by page (chunks are page aligned: each page is
        written, and quantised, once)."""
        if self.quantized:
            quantize_chunk(self.k_pages[layer], self.k_scales[layer], first_page, k, "k")
            quantize_chunk(self.v_pages[layer], self.v_scales[layer], first_page, v, "v")
            return
        flat_k, flat_v = self.flat(layer)
        start = first_page * self.page_size
        flat_k[start : start + k.shape[0]] = k
        flat_v[start : start + v.shape[0]] = v

    def slot_lens(self) -> torch.Tensor:
        """(num_pages,) int32 valid tokens per page: full pages, ragged last page."""
        device = next(iter(self.k_pages.values())).device if self.k_pages else "cpu"
        lens = torch.full((self.num_pages,), self.page_size, dtype=torch.int32, device=device)
        if self.num_pages:
            lens[-1] = self.last_page_len
        return lens

    @classmethod
    def allocate(cls, layout: LayerLayout, page_size: int, num_tokens: int, dtype, device,
                 kv_dtype: torch.dtype | None = None) -> "DocKV":
        """Zeroed pages; ``kv_dtype`` float8_e4m3fn / int8: quantised pages (with scales) that
        dequantise to ``dtype``, None: pages in ``dtype``."""
        n_pages = -(-num_tokens // page_size)
        shape = (n_pages, page_size, layout.num_kv_heads, layout.head_dim)
        if kv_dtype is not None:
            doc = cls(layout, page_size, num_tokens, {}, {}, compute_dtype=dtype)
            for l in layout.global_layers:
                doc.k_pages[l], doc.k_scales[l] = allocate_pool(shape, kv_dtype, "k", device)
                doc.v_pages[l], doc.v_scales[l] = allocate_pool(shape, kv_dtype, "v", device)
            return doc
        k = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layout.global_layers}
        v = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layout.global_layers}
        return cls(layout, page_size, num_tokens, k, v, compute_dtype=dtype)

    def kv_bytes(self) -> int:
        """Device bytes of the pages (values and scales) and the sliding windows."""
        paged = sum(t.numel() * t.element_size() for t in (*self.k_pages.values(), *self.v_pages.values(),
                                                           *self.k_scales.values(), *self.v_scales.values()))
        window = sum(t.numel() * t.element_size() for t in (*self.window_k.values(), *self.window_v.values()))
        return paged + window

    def device_bytes(self) -> int:
        """KV bytes plus the static query buffers and graph memory kept with this document."""
        slots = [*self.query_slots.values(), *self.batch_slots.values(),
                 *(qs for pool in self.long_slots.values() for qs in pool)]
        return self.kv_bytes() + sum(qs.nbytes() for qs in slots)

    # -- store exchange -------------------------------------------------------------
    def page_tensor(self, i: int) -> torch.Tensor | QuantKVPage:
        """The store's unit for page i: (L_global, 2, P, Hkv, D), or for quantised pages a
        ``QuantKVPage`` of the values and scales as the device holds them (no requantisation)."""
        if self.quantized:
            return page_unit(self.k_pages, self.v_pages, self.k_scales, self.v_scales, self.layout.global_layers, i,
                             self.float_dtype)
        return torch.stack(
            [torch.stack([self.k_pages[l][i], self.v_pages[l][i]]) for l in self.layout.global_layers]
        )

    def put_pages(self, first_page: int, units: list[torch.Tensor | QuantKVPage]) -> None:
        """Write store units (``page_tensor``'s form) from page ``first_page`` on, in this document's
        format: float units cast (or quantised), QuantKVPages of this dtype copied as they are (else
        dequantised first). For a prefill resumed from a checkpoint; never assign float pages to
        quantised ``k_pages`` directly (a cast to int8/fp8 would silently drop the scales)."""
        for i, u in enumerate(units, start=first_page):
            same = isinstance(u, QuantKVPage) and self.quantized and u.data.dtype == self.kv_dtype
            page = None if same else (u.dequantize(self.float_dtype) if isinstance(u, QuantKVPage) else u)
            for j, l in enumerate(self.layout.global_layers):
                if same:
                    self.k_pages[l][i], self.v_pages[l][i] = u.data[j, 0], u.data[j, 1]
                    self.k_scales[l][i], self.v_scales[l][i] = u.k_scale[j], u.v_scale[j]
                else:
                    x = page[j].to(self.k_pages[l].device, self.float_dtype)
                    self.write_chunk(l, i, x[0, : self.page_size], x[1, : self.page_size])

    def window_tensor(self) -> torch.Tensor | None:
        """(L_sliding, 2, Wt, Hkv, D) the sliding-layer state, or None without sliding layers."""
        if not self.layout.sliding_layers:
            return None
        return torch.stack(
            [torch.stack([self.window_k[l], self.window_v[l]]) for l in self.layout.sliding_layers]
        )

    @classmethod
    def from_tensors(
        cls,
        layout: LayerLayout,
        page_size: int,
        num_tokens: int,
        pages: list[torch.Tensor | QuantKVPage],
        window: torch.Tensor | None,
        device=None,
        kv_dtype: torch.dtype | None = None,
        dtype: torch.dtype | None = None,
    ) -> "DocKV":
        """Rebuild from store pages (each (L_global, 2, P, Hkv, D), or a ``QuantKVPage``) and the
        window tensor. ``kv_dtype`` float8_e4m3fn / int8: quantised pages (QuantKVPages of that
        dtype are taken as they are; see ``quant_kv.pools_from_units``) that dequantise to
        ``dtype`` (None: the pages' recorded dtype); None: float pages (quantised ones dequantised
        to ``dtype`` or their recorded dtype)."""
        layers = layout.global_layers
        if kv_dtype is not None:
            k, v, ks, vs = pools_from_units(pages, layers, page_size, num_tokens, kv_dtype, device)
            recorded = next((p.dtype for p in pages if isinstance(p, QuantKVPage)), None) or \
                next((p.dtype for p in pages if isinstance(p, torch.Tensor)), None)
            doc = cls(layout, page_size, num_tokens, k, v, ks, vs, compute_dtype=dtype or recorded)
        else:
            pages = [p.dequantize(dtype) if isinstance(p, QuantKVPage) else p for p in pages]
            stacked = torch.stack(pages).to(device=device, dtype=dtype) if pages else None  # (N, Lg, 2, P, Hkv, D)
            k = {l: stacked[:, j, 0].contiguous() for j, l in enumerate(layers)}
            v = {l: stacked[:, j, 1].contiguous() for j, l in enumerate(layers)}
            doc = cls(layout, page_size, num_tokens, k, v)
        if window is not None:
            window = window.to(device)
            wt = window.shape[2]
            doc.window_k = {l: window[j, 0] for j, l in enumerate(layout.sliding_layers)}
            doc.window_v = {l: window[j, 1] for j, l in enumerate(layout.sliding_layers)}
            doc.window_pos = torch.arange(num_tokens - wt, num_tokens, device=window.device)
        return doc


@dataclass
class QueryTail:
    """Private KV of one query (its prompt and generated tokens), per layer: (t, Hkv, D)."""

    start: int  # absolute position of the first tail token (= document length)
    k: dict[int, torch.Tensor] = field(default_factory=dict)
    v: dict[int, torch.Tensor] = field(default_factory=dict)
    length: int = 0
    # Set when the tail lives in preallocated static slots (serving.runner.static_query.TailBinding);
    # then k/v above stay empty.
    static: object | None = None
    # Set while the tail lives in a row of static decode buffers (serving.runner.batch_slots.RowBinding).
    batch: object | None = None

    def positions(self, device) -> torch.Tensor:
        return torch.arange(self.start, self.start + self.length, device=device)

    def fork(self) -> "QueryTail":
        """A tail that continues from this one's tokens (e.g. one per scored option).

        Eager tails are forked by a shallow copy: their tensors are replaced, never written
        in place. Static tails share their slots: a fork writes only past the common length,
        so forks extended one after another each see the shared prefix intact.
        """
        if self.batch is not None:
            raise ValueError("a tail in a batched decode row cannot be forked")
        return QueryTail(self.start, dict(self.k), dict(self.v), self.length, self.static)
