"""Attention over one context whose KV pages are sharded by sequence across ranks.

Every rank of a ``torch.distributed`` process group holds one contiguous page
range ``[start, stop)`` of the context (``serving.sharding.plan.ShardPlan``), for
every global layer, as a local pool ``(S_local, P, Hkv, D)`` whose slot ``i``
is global page ``start + i``. Attention over a selection of global pages is

1. restricted on each rank to the selected pages it holds, remapped to local
   slot ids (:func:`local_selection` from host lists, or
   :func:`restrict_block_table` on the device without a host sync);
2. computed locally with :func:`kernels.attend_selected` -> ``(out, lse)``; a
   rank holding none of the selected pages contributes ``out = 0, lse = -inf``;
3. merged exactly across ranks, so that every rank ends with the same
   ``(out, lse)`` (which lets each rank run the rest of the layer itself):
   ``merge="gather"`` (one all_gather, for decode) or ``merge="reduce"`` (two
   all_reduces, for long query chunks on many ranks); see ``serving.sharding.merge``.

``chunks`` cuts the work along the KV-head axis (or batch / query-token axis)
so that each chunk's merge runs while the next chunk is computed
(``serving.sharding.merge`` says how).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agentctx.kernels import attend_selected, attend_selected_quant
from agentctx.kernels.kv_quant import QuantPages
from agentctx.kernels.positional import full_attention_lse
from agentctx.serving.sharding.merge import _pipelined

__all__ = [
    "LocalSelection",
    "local_selection",
    "restrict_block_table",
    "sharded_attend",
    "sharded_attend_dense",
    "KVShard",
    "CHUNK_DIMS",
    "Pool",
    "pool_shape",
    "pool_slice",
    "pool_to",
]

CHUNK_DIMS = ("heads", "batch", "tokens")


# --------------------------------------------------------------------------- selection
@dataclass
class LocalSelection:
    """One rank's part of a selection.

    block_table (B, M) int32 local slot ids (row b uses ``[:num_blocks[b]]``),
    num_blocks (B,) int32; total = selected pages on this rank when known on
    the host (0 lets the rank skip the kernel), None when built on the device.
    """

    block_table: Tensor
    num_blocks: Tensor
    total: int | None = None


def _rows(selected, batch: int | None, page_range: tuple[int, int]) -> list[list[int]]:
    start, stop = page_range
    if selected is None:
        return [list(range(start, stop))] * (batch or 1)
    sel = list(selected)
    if not sel:
        return [[] for _ in range(batch or 1)]
    if not isinstance(sel[0], (list, tuple, range)) and not (isinstance(sel[0], Tensor) and sel[0].dim() > 0):
        sel = [sel] * (batch or 1)  # one page list shared by every row
    if batch is not None and len(sel) != batch:
        raise ValueError(f"selection has {len(sel)} rows, expected {batch}")
    return [[int(p) for p in row] for row in sel]


def local_selection(
    selected: Sequence[int] | Sequence[Sequence[int]] | None,
    page_range: tuple[int, int],
    device: torch.device | str = "cpu",
    batch: int | None = None,
) -> LocalSelection:
    """Restrict a host-side selection of *global* page ids to this rank's range.

    Args:
        selected: None (every page), one list of global page ids used by every
            row, or one list per row. Duplicates are dropped and pages sorted.
        page_range: (start, stop) global pages held by this rank.
        device: where the tables go.
        batch: number of rows B (needed when ``selected`` is None or one flat list).

    The table width is the largest local count (at least 1), so kernels that
    size their launch by the table width do not over-split.
    """
    start, stop = page_range
    rows = _rows(selected, batch, page_range)
    local = [sorted({p - start for p in row if start <= p < stop}) for row in rows]
    width = max([1] + [len(r) for r in local])
    table = torch.zeros(len(local), width, dtype=torch.int32)
    for b, r in enumerate(local):
        if r:
            table[b, : len(r)] = torch.tensor(r, dtype=torch.int32)
    num = torch.tensor([len(r) for r in local], dtype=torch.int32)
    return LocalSelection(table.to(device), num.to(device), sum(len(r) for r in local))


def restrict_block_table(block_table: Tensor, num_blocks: Tensor, page_start: int, page_stop: int) -> LocalSelection:
    """Device-side restriction of a global (B, M) block table to ``[page_start, page_stop)``.

    Keeps the selected entries that fall in the range, in their original order,
    compacted to the front and shifted to local ids; padding is 0. No host
    synchronisation (the width stays M), so it can run inside a CUDA graph.
    """
    B, M = block_table.shape
    col = torch.arange(M, device=block_table.device)[None, :]
    bt = block_table.long()
    keep = (col < num_blocks.long()[:, None]) & (bt >= page_start) & (bt < page_stop)
    # Stable compaction: kept columns first (in order), then the rest.
    key = torch.where(keep, col, col + M)
    order = torch.argsort(key, dim=1)
    local = torch.gather(bt - page_start, 1, order)
    count = keep.sum(dim=1)
    local = torch.where(col < count[:, None], local, torch.zeros_like(local))
    return LocalSelection(local.to(torch.int32), count.to(torch.int32), None)


# --------------------------------------------------------------------------- attention
def _bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    chunks = max(1, min(int(chunks), n)) if n > 0 else 1
    edges = [round(i * n / chunks) for i in range(chunks + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a] or [(0, n)]


def _empty_partial(q: Tensor) -> tuple[Tensor, Tensor]:
    return torch.zeros_like(q), torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)


# A rank's pool of one layer: float pages, or quantised pages with their scales (issue 30). The
# scales of every granularity keep the pool's S and Hkv dimensions, so a pool slices alike.
Pool = Tensor | QuantPages


def pool_shape(p: Pool) -> tuple[int, ...]:
    return tuple((p.data if isinstance(p, QuantPages) else p).shape)


def pool_slice(p: Pool, dim: int, a: int, b: int) -> Pool:
    """p[..., a:b, ...] along ``dim`` (0: slots, 2: KV heads), the scales with the values."""
    idx = (slice(None),) * dim + (slice(a, b),)
    return QuantPages(p.data[idx], p.scale[idx]) if isinstance(p, QuantPages) else p[idx]


def pool_to(p: Pool, device) -> Pool:
    if isinstance(p, QuantPages):
        return QuantPages(p.data.to(device).contiguous(), p.scale.to(device).contiguous())
    return p.to(device).contiguous()


def sharded_attend(
    q: Tensor,
    k_pages: Pool,
    v_pages: Pool,
    slot_lens: Tensor,
    sel: LocalSelection,
    scale: float,
    softcap: float | None = None,
    *,
    group=None,
    impl: str = "auto",
    merge: str = "gather",
    chunks: int = 1,
    chunk_dim: str = "heads",
) -> tuple[Tensor, Tensor]:
    """Selected-page attention of ``q`` over a context sharded across the ranks of ``group``.

    Args:
        q: (B, Tq, Hq, D), identical on every rank.
        k_pages, v_pages: (S_local, P, Hkv, D) this rank's pages of one layer, float or
            :class:`QuantPages` (fp8 / int8 with their scales, read by ``attend_selected_quant``).
        slot_lens: (S_local,) int32 valid tokens per local slot.
        sel: this rank's part of the selection (local slot ids).
        scale, softcap, impl: as :func:`kernels.attend_selected`.
        group: process group (None = default; no initialised group = single rank).
        merge: "gather" or "reduce" (see ``serving.sharding.merge``).
        chunks: pieces to pipeline communication against compute (1 = none).
        chunk_dim: "heads" (KV-head groups), "batch" or "tokens" (query tokens).

    Returns:
        out (B, Tq, Hq, D) in q.dtype and lse (B, Tq, Hq) float32, the same on
        every rank and equal (up to rounding) to attention over the union of
        all ranks' selected pages.
    """
    if chunk_dim not in CHUNK_DIMS:
        raise ValueError(f"chunk_dim must be one of {CHUNK_DIMS}, got {chunk_dim!r}")
    B, Tq, Hq, D = q.shape
    Hkv = pool_shape(k_pages)[2]
    if Hq % Hkv:
        raise ValueError(f"sharded_attend: Hq ({Hq}) must be a multiple of Hkv ({Hkv})")
    if isinstance(k_pages, QuantPages) != isinstance(v_pages, QuantPages):
        raise ValueError("sharded_attend: k_pages and v_pages must both be quantised or both float")
    g = Hq // Hkv
    empty = sel.total == 0 or pool_shape(k_pages)[0] == 0
    attend = attend_selected_quant if isinstance(k_pages, QuantPages) else attend_selected

    def local(qq, kk, vv, bt, nb):
        if empty:
            return _empty_partial(qq)
        return attend(qq, kk, vv, bt, nb, slot_lens, scale, softcap=softcap, impl=impl)

    if chunk_dim == "heads":
        pieces = _bounds(Hkv, chunks)

        def compute(p):
            a, b = p
            if (a, b) == (0, Hkv):
                return local(q, k_pages, v_pages, sel.block_table, sel.num_blocks)
            return local(q[:, :, a * g : b * g], pool_slice(k_pages, 2, a, b), pool_slice(v_pages, 2, a, b),
                         sel.block_table, sel.num_blocks)

        return _pipelined(pieces, compute, group, merge, cat_dim=2)
    if chunk_dim == "batch":
        pieces = _bounds(B, chunks)

        def compute(p):
            a, b = p
            return local(q[a:b], k_pages, v_pages, sel.block_table[a:b], sel.num_blocks[a:b])

        return _pipelined(pieces, compute, group, merge, cat_dim=0)
    pieces = _bounds(Tq, chunks)

    def compute(p):
        a, b = p
        return local(q[:, a:b], k_pages, v_pages, sel.block_table, sel.num_blocks)

    return _pipelined(pieces, compute, group, merge, cat_dim=1)


def sharded_attend_dense(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    softcap: float | None = None,
    *,
    group=None,
    merge: str = "gather",
    chunks: int = 1,
    chunk_dim: str = "tokens",
) -> tuple[Tensor, Tensor]:
    """Every query sees every local key (a prefill chunk against the sharded prefix).

    q: (Tq, Hq, D) identical on every rank; k, v: (T_local, Hkv, D) this
    rank's contiguous valid tokens (T_local may be 0). Uses
    :func:`kernels.positional.full_attention_lse` (fused flash kernel on CUDA).
    Returns out (Tq, Hq, D) q.dtype, lse (Tq, Hq) fp32, identical on every rank.
    """
    if chunk_dim not in ("tokens", "heads"):
        raise ValueError(f"sharded_attend_dense: chunk_dim must be 'tokens' or 'heads', got {chunk_dim!r}")
    Tq, Hq, D = q.shape
    Hkv = k.shape[1]
    g = Hq // Hkv

    def local(qq, kk, vv):
        if kk.shape[0] == 0:
            return _empty_partial(qq)
        return full_attention_lse(qq, kk, vv, scale, softcap)

    if chunk_dim == "tokens":
        return _pipelined(_bounds(Tq, chunks), lambda p: local(q[p[0] : p[1]], k, v), group, merge, cat_dim=0)
    return _pipelined(
        _bounds(Hkv, chunks),
        lambda p: local(q[:, p[0] * g : p[1] * g], k[:, p[0] : p[1]], v[:, p[0] : p[1]]),
        group,
        merge,
        cat_dim=1,
    )


# --------------------------------------------------------------------------- per-rank state
@dataclass
class KVShard:
    """This rank's page range of one context, for every global layer.

    k_pages[layer], v_pages[layer]: (S_local, P, Hkv, D), float or :class:`QuantPages`;
    slot_lens: (S_local,) int32 (on the pages' device). ``page_start`` maps local slot i to global
    page ``page_start + i``.
    """

    page_start: int
    page_stop: int
    k_pages: dict[int, Pool]
    v_pages: dict[int, Pool]
    slot_lens: Tensor
    group: object = None
    _host_lens: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        n = self.page_stop - self.page_start
        if n < 0:
            raise ValueError(f"KVShard: bad page range [{self.page_start}, {self.page_stop})")
        if self.slot_lens.shape != (n,):
            raise ValueError(f"KVShard: slot_lens shape {tuple(self.slot_lens.shape)} != ({n},)")
        for layer, k in self.k_pages.items():
            shape = pool_shape(k)
            if shape[0] != n or pool_shape(self.v_pages[layer]) != shape:
                raise ValueError(f"KVShard: layer {layer} pages {shape} do not hold {n} slots")
        self._host_lens = [int(x) for x in self.slot_lens.cpu().tolist()]

    @property
    def num_pages(self) -> int:
        return self.page_stop - self.page_start

    @property
    def page_range(self) -> tuple[int, int]:
        return (self.page_start, self.page_stop)

    @property
    def device(self) -> torch.device:
        return self.slot_lens.device

    def select(self, selected=None, batch: int | None = None) -> LocalSelection:
        """This rank's part of a selection of global pages (see :func:`local_selection`)."""
        return local_selection(selected, self.page_range, self.device, batch)

    def attend(self, layer: int, q: Tensor, sel: LocalSelection, scale: float | None = None,
               softcap: float | None = None, **kw) -> tuple[Tensor, Tensor]:
        """:func:`sharded_attend` for one layer; scale defaults to 1/sqrt(D)."""
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        return sharded_attend(q, self.k_pages[layer], self.v_pages[layer], self.slot_lens, sel, scale, softcap,
                              group=self.group, **kw)

    def dense_tokens(self, layer: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """(T_local, Hkv, D) views of this rank's valid tokens (quantised pages: dequantised to
        ``dtype``); needs every page but the last full."""
        lens = self._host_lens
        P = pool_shape(self.k_pages[layer])[1]
        if any(x != P for x in lens[:-1]):
            raise ValueError("KVShard.dense_tokens: an inner page is not full; use attend() with a selection")
        n = sum(lens)
        k, v = self.k_pages[layer], self.v_pages[layer]
        if isinstance(k, QuantPages):
            k, v = k.dequantize(dtype), v.dequantize(dtype)
        return k.reshape(-1, *k.shape[2:])[:n], v.reshape(-1, *v.shape[2:])[:n]

    def attend_dense(self, layer: int, q: Tensor, scale: float | None = None, softcap: float | None = None,
                     **kw) -> tuple[Tensor, Tensor]:
        """:func:`sharded_attend_dense` of q (Tq, Hq, D) over every token of the context."""
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        k, v = self.dense_tokens(layer, q.dtype)
        return sharded_attend_dense(q, k, v, scale, softcap, group=self.group, **kw)
