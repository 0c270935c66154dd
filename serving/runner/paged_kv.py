"""KV state of one prefilled document, in pages, plus the private tail of one query.

Global-attention layers keep the whole document as pages of P tokens (keys stored
after RoPE, at their true positions), laid out so that page i of layer l is
``k_pages[l][i]`` with shape (P, Hkv, D). Sliding-window layers keep only the last
W tokens of the document: that is all any later token can see in those layers.

The page tensor of the store (one content-addressed unit) stacks every global
layer's K and V for one page: (L_global, 2, P, Hkv, D).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

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
        """Bytes of paged KV per document token (global layers only)."""
        return 2 * len(self.global_layers) * self.num_kv_heads * self.head_dim * torch.finfo(dtype).bits // 8


@dataclass
class DocKV:
    """A document's KV: pages for global layers, a trailing window for sliding layers.

    k_pages[l], v_pages[l]: (num_pages, P, Hkv, D) for each global layer l.
    window_k[l], window_v[l]: (Wt, Hkv, D) the last Wt <= W tokens, positions window_pos (Wt,).
    """

    layout: LayerLayout
    page_size: int
    num_tokens: int
    k_pages: dict[int, torch.Tensor]
    v_pages: dict[int, torch.Tensor]
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

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(num_pages * P, Hkv, D) views of one global layer's K and V, token after token: pages
        are contiguous, so a run of whole pages (or the document) is a slice, not a gather."""
        k, v = self.k_pages[layer], self.v_pages[layer]
        return k.view(-1, *k.shape[2:]), v.view(-1, *v.shape[2:])

    def slot_lens(self) -> torch.Tensor:
        """(num_pages,) int32 valid tokens per page: full pages, ragged last page."""
        device = next(iter(self.k_pages.values())).device if self.k_pages else "cpu"
        lens = torch.full((self.num_pages,), self.page_size, dtype=torch.int32, device=device)
        if self.num_pages:
            lens[-1] = self.last_page_len
        return lens

    @classmethod
    def allocate(cls, layout: LayerLayout, page_size: int, num_tokens: int, dtype, device) -> "DocKV":
        n_pages = -(-num_tokens // page_size)
        shape = (n_pages, page_size, layout.num_kv_heads, layout.head_dim)
        k = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layout.global_layers}
        v = {l: torch.zeros(shape, dtype=dtype, device=device) for l in layout.global_layers}
        return cls(layout, page_size, num_tokens, k, v)

    def kv_bytes(self) -> int:
        paged = sum(t.numel() * t.element_size() for t in (*self.k_pages.values(), *self.v_pages.values()))
        window = sum(t.numel() * t.element_size() for t in (*self.window_k.values(), *self.window_v.values()))
        return paged + window

    def device_bytes(self) -> int:
        """KV bytes plus the static query buffers and graph memory kept with this document."""
        slots = [*self.query_slots.values(), *self.batch_slots.values(),
                 *(qs for pool in self.long_slots.values() for qs in pool)]
        return self.kv_bytes() + sum(qs.nbytes() for qs in slots)

    # -- store exchange -------------------------------------------------------------
    def page_tensor(self, i: int) -> torch.Tensor:
        """(L_global, 2, P, Hkv, D) the store's unit for page i."""
        return torch.stack(
            [torch.stack([self.k_pages[l][i], self.v_pages[l][i]]) for l in self.layout.global_layers]
        )

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
        pages: list[torch.Tensor],
        window: torch.Tensor | None,
        device=None,
    ) -> "DocKV":
        """Rebuild from store pages (each (L_global, 2, P, Hkv, D)) and the window tensor."""
        stacked = torch.stack(pages).to(device) if pages else None  # (N, Lg, 2, P, Hkv, D)
        k = {l: stacked[:, j, 0].contiguous() for j, l in enumerate(layout.global_layers)}
        v = {l: stacked[:, j, 1].contiguous() for j, l in enumerate(layout.global_layers)}
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
