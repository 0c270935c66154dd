"""Static buffers for the decode rows of many queries over one document, replayable as CUDA graphs.

The GPU side of the scheduler (docs/KERNELS.md, "Batched decode rows in graph mode"). A
:class:`BatchSlots` holds, for one document and one block-table width, R rows of the
buffers that :class:`~agentctx.serving.static_query.QuerySlots` holds for one query:

* per global layer a tail buffer (R, C, Hkv, D); per sliding layer (R, Wt + C, Hkv, D)
  starting with the document's window, so a row's band is contiguous;
* a block table (R, width) and page counts (R,): each row its own plan;
* one int64 input buffer: the R rows' token ids, then their tail slots.

One decode step of any set of live rows is one forward over the first ``b`` rows, b the
smallest bucket (1, 2, 4, ... R) holding the highest live row; a graph is captured per
bucket. Rows in the bucket with no token this step run as dummies at their next free slot
(their own buffer, overwritten by their next real token before anything reads it), so one
graph serves any set of live rows. Per layer: one page-kernel launch over the b rows (the
kernel takes a (B, width) table), then one tail-merge (global) or window (sliding) launch
per row; inside a graph those are cheap.

Prompts do not run here: the scheduler runs a prompt chunk through the document's
``QuerySlots`` (its own graphs) and keeps the tail in ordinary tensors until its first decode
token, when :meth:`BatchSlots.acquire` copies it into a free row (serving/batch_forward.py).
A tail bound to a row carries a :class:`RowBinding`; rows are given back with
:meth:`BatchSlots.release`. On CPU (tests) the same forward runs eagerly.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from agentctx.kernels import attend_selected
from agentctx.kernels.tail_merge import attend_tail_merged, attend_window
from agentctx.serving.paged_kv import DocKV, QueryTail

__all__ = ["BatchSlots", "RowBinding", "BatchStaticStep", "batch_static_attention", "row_bucket"]

log = logging.getLogger(__name__)


def row_bucket(n: int, rows: int) -> int:
    """Smallest power of two >= n, at most rows."""
    return min(rows, 1 << max(0, (n - 1).bit_length()))


@dataclass
class RowBinding:
    """Ties a :class:`QueryTail` to its row of a :class:`BatchSlots`."""

    slots: BatchSlots
    row: int


@dataclass
class BatchStaticStep:
    """The per-forward state the attention hook reads: b rows, one token each."""

    bs: BatchSlots
    rows: int
    slots: torch.Tensor  # (b,) int64 tail slot of each row's token


class BatchSlots:
    """R rows of static decode buffers over one document and one table width."""

    def __init__(self, runner, doc: DocKV, width: int, rows: int, capacity: int):
        layout = doc.layout
        dev, dt = runner.device, runner.dtype
        self.runner, self.layout, self.width, self.rows, self.capacity = runner, layout, width, rows, capacity
        self.start = doc.num_tokens
        self.k_pages, self.v_pages = doc.k_pages, doc.v_pages
        self.slot_lens = doc.slot_lens()
        shape = (rows, capacity, layout.num_kv_heads, layout.head_dim)
        self.tail_k = {l: torch.zeros(shape, dtype=dt, device=dev) for l in layout.global_layers}
        self.tail_v = {l: torch.zeros(shape, dtype=dt, device=dev) for l in layout.global_layers}
        self.wt = int(doc.window_pos.numel()) if layout.sliding_layers else 0
        self.win_k: dict[int, torch.Tensor] = {}
        self.win_v: dict[int, torch.Tensor] = {}
        for l in layout.sliding_layers:
            for src, dst in ((doc.window_k[l], self.win_k), (doc.window_v[l], self.win_v)):
                buf = torch.zeros((rows, self.wt + capacity, *shape[2:]), dtype=dt, device=dev)
                buf[:, : self.wt] = src
                dst[l] = buf
        self.inputs = torch.zeros(2 * rows, dtype=torch.long, device=dev)
        self.table = torch.zeros(rows, width, dtype=torch.int32, device=dev)
        self.num_blocks = torch.ones(rows, dtype=torch.int32, device=dev)
        self._tail_base = torch.arange(rows, device=dev) * capacity
        self._win_base = torch.arange(rows, device=dev) * (self.wt + capacity) + self.wt
        self.lengths = [0] * rows  # tokens in each row's tail
        self.live = [False] * rows
        self.pages: list[tuple[int, ...] | None] = [None] * rows
        self._lock = threading.Lock()  # rows are released from requests' threads
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.failed: dict[int, str] = {}
        self.pool = None
        self.graph_bytes = 0

    def nbytes(self) -> int:
        bufs = [*self.tail_k.values(), *self.tail_v.values(), *self.win_k.values(), *self.win_v.values()]
        return sum(t.numel() * t.element_size() for t in bufs) + self.graph_bytes

    # ------------------------------------------------------------------ rows
    def acquire(self, tail: QueryTail, pages: tuple[int, ...]) -> bool:
        """Give a free row to an eager tail (its K/V copied in); False when none is free or it won't fit."""
        if len(pages) > self.width or tail.length >= self.capacity - 1:
            return False
        with self._lock:
            free = next((r for r in range(self.rows) if not self.live[r]), None)
            if free is None:
                return False
            self.live[free] = True
        n = tail.length
        for l in self.layout.global_layers:
            if n:
                self.tail_k[l][free, :n] = tail.k[l]
                self.tail_v[l][free, :n] = tail.v[l]
        for l in self.layout.sliding_layers:
            if n:
                self.win_k[l][free, self.wt : self.wt + n] = tail.k[l]
                self.win_v[l][free, self.wt : self.wt + n] = tail.v[l]
        self.lengths[free] = n
        self._load_pages(free, pages)
        tail.k, tail.v, tail.batch = {}, {}, RowBinding(self, free)
        return True

    def _load_pages(self, row: int, pages: tuple[int, ...]) -> None:
        if self.pages[row] == pages:
            return
        t = torch.zeros(self.width, dtype=torch.int32)
        t[: len(pages)] = torch.tensor(pages, dtype=torch.int32)
        self.table[row].copy_(t)
        self.num_blocks[row] = len(pages)
        self.pages[row] = pages

    def materialize(self, tail: QueryTail) -> None:
        """Copy a row's tail out into eager tensors and give the row back."""
        row, n = tail.batch.row, tail.length
        for l in self.layout.global_layers:
            tail.k[l], tail.v[l] = self.tail_k[l][row, :n].clone(), self.tail_v[l][row, :n].clone()
        for l in self.layout.sliding_layers:
            tail.k[l] = self.win_k[l][row, self.wt : self.wt + n].clone()
            tail.v[l] = self.win_v[l][row, self.wt : self.wt + n].clone()
        self.release(tail)

    def release(self, tail: QueryTail) -> None:
        b = tail.batch
        if b is None or b.slots is not self:
            return
        with self._lock:
            self.live[b.row] = False
            self.lengths[b.row] = 0
        tail.batch = None

    # ------------------------------------------------------------------ decode
    def _forward(self, b: int) -> torch.Tensor:
        ids = self.inputs[:b]
        slots = self.inputs[self.rows : self.rows + b]
        step = BatchStaticStep(self, b, slots)
        hidden = self.runner._hidden_rows(ids.view(1, b), (slots + self.start).view(1, b), step)[0]
        return self.runner.logits_from_hidden(hidden)  # (b, vocab)

    def _capture(self, b: int) -> None:
        dev = self.inputs.device
        try:
            graph = torch.cuda.CUDAGraph()
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            before = torch.cuda.memory_reserved(dev)
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                logits = self._forward(b)
        except Exception as exc:  # noqa: BLE001 - stay correct: run this bucket eagerly
            self.failed[b] = f"{type(exc).__name__}: {exc}"
            log.warning("CUDA graph capture for %d decode rows failed (%s: %s); running them eagerly",
                        b, type(exc).__name__, exc)
            return
        self.graphs[b] = (graph, logits)
        self.graph_bytes += max(0, torch.cuda.memory_reserved(dev) - before)

    @torch.inference_mode()
    def decode(self, tails: list[QueryTail], tokens: list[int]) -> torch.Tensor:
        """One token for each of these bound tails in one forward; returns their logits (n, vocab)."""
        with self._lock:
            top = max(t.batch.row for t in tails) + 1
            b = row_bucket(top, self.rows)
            host = torch.zeros(2 * self.rows, dtype=torch.long)
            # Dummies write at their row's next free slot (0 for a free row): never read before
            # that row's next real token overwrites it.
            host[self.rows : self.rows + b] = torch.tensor([min(n, self.capacity - 1) for n in self.lengths[:b]])
        rows = [t.batch.row for t in tails]
        for t, tok in zip(tails, tokens):
            host[t.batch.row] = tok
        self.inputs.copy_(host)
        use_graphs = self.runner.query_mode == "graph"
        entry = self.graphs.get(b) if use_graphs else None
        if entry is not None:
            entry[0].replay()
            logits = entry[1]
        else:
            logits = self._forward(b)
            if use_graphs and b not in self.failed:
                self._capture(b)
        out = logits.index_select(0, torch.tensor(rows, device=logits.device))  # a copy: replays overwrite
        with self._lock:
            for t in tails:
                t.length += 1
                if self.live[t.batch.row]:  # not released meanwhile (a cancelled request)
                    self.lengths[t.batch.row] = t.length
        return out


def batch_static_attention(step: BatchStaticStep, layer: int, q, k, v, scale: float, softcap) -> torch.Tensor:
    """Attention of b rows' decode tokens (q (b, Hq, D)) for one layer, writing their K/V."""
    bs, b, slots = step.bs, step.rows, step.slots
    runner = bs.runner
    if layer in bs.layout.sliding_layers:
        keys, vals = bs.win_k[layer], bs.win_v[layer]
        dst = bs._win_base[:b] + slots
        keys.view(-1, *keys.shape[2:]).index_copy_(0, dst, k)
        vals.view(-1, *vals.shape[2:]).index_copy_(0, dst, v)
        return torch.cat([attend_window(q[r : r + 1], keys[r], vals[r], slots[r : r + 1], bs.wt, bs.layout.window,
                                        scale, softcap, impl=runner.window_impl, check=False) for r in range(b)])
    tk, tv = bs.tail_k[layer], bs.tail_v[layer]
    dst = bs._tail_base[:b] + slots
    tk.view(-1, *tk.shape[2:]).index_copy_(0, dst, k)
    tv.view(-1, *tv.shape[2:]).index_copy_(0, dst, v)
    o_pages, l_pages = attend_selected(q.unsqueeze(1), bs.k_pages[layer], bs.v_pages[layer], bs.table[:b],
                                       bs.num_blocks[:b], bs.slot_lens, scale, softcap=softcap,
                                       impl=runner.kernel_impl)
    return torch.cat([attend_tail_merged(q[r : r + 1], tk[r], tv[r], slots[r : r + 1], o_pages[r], l_pages[r],
                                         scale, softcap, impl=runner.tail_impl, check=False) for r in range(b)])
