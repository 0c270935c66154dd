"""The persistent batch of one document's decode rows, replayable as CUDA graphs.

The GPU side of the engine loop (docs/KERNELS.md, "The decode step of many agents"). A
:class:`BatchSlots` holds, for one document, R rows of static buffers that stay put while their
requests decode:

* per global layer a tail buffer (R, C, Hkv, D); per sliding layer (R, Wt + C, Hkv, D) starting
  with the document's window, so a row's band is contiguous;
* the rows' plans: the **union** of their pages (U,) and one bit per row and union page
  (union mode, the default), or a block table per row (R, width) (``union=False``: each row
  reads its own pages, the row-by-row peer);
* one int64 input buffer: the R rows' token ids, then their tail slots.

A step writes only what changed: the input buffer (one small host-to-device copy from pinned
memory) and, when a row is bound, released or changes plan, the union tables. One decode step of
any set of live rows is one forward over the first ``b`` rows, b the smallest bucket (1, 2, 4,
... R) holding the highest live row; a graph is captured per bucket. Rows in the bucket with no
token this step run as dummies at their next free slot (their own buffer, overwritten by their
next real token before anything reads it; they select no page). Per global layer: one union page
kernel launch (each union page read once for every row that selected it,
kernels/union_attend.py) and one tail-merge launch for all rows; per sliding layer one window
launch for all rows (the slot kernels' per-token tiles, kernels/tail_merge.py ``q_base``).

Prompts do not run here: the engine runs a prompt chunk through the document's ``QuerySlots``
(its own graphs) and keeps the tail in ordinary tensors until its first decode token, when
:meth:`BatchSlots.acquire` copies it into a free row (serving/runner/batch_forward.py). A tail
bound to a row carries a :class:`RowBinding`; rows are given back with :meth:`BatchSlots.release`.
On CPU (tests) the same forward runs eagerly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from agentctx.kernels import attend_selected
from agentctx.kernels.slot_write import write_slots
from agentctx.kernels.tail_merge import attend_tail_merged, attend_window
from agentctx.kernels.union_attend import MAX_ROWS, attend_union
from agentctx.serving.runner.paged_kv import DocKV, QueryTail
from agentctx.serving.runner.quant_kv import layer_pool

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
    """The per-forward state the attention hook reads: b rows, one token each.

    The flat-buffer indices are the same in every layer, so they are computed once per forward
    (three small kernels) instead of once per layer (~50 per Gemma step)."""

    bs: BatchSlots
    rows: int
    slots: torch.Tensor  # (b,) int64 tail slot of each row's token
    tail_dst: torch.Tensor  # (b,) each token's entry in the flat tail buffer of a global layer
    win_dst: torch.Tensor  # (b,) its entry in the flat [window | tail] buffer of a sliding layer
    win_slot: torch.Tensor  # (b,) win_dst less the window: the slot the window kernel is given

    @classmethod
    def of(cls, bs: BatchSlots, b: int, slots: torch.Tensor) -> BatchStaticStep:
        tail_dst = bs._tail_base[:b] + slots
        win_slot = bs._win_base[:b] + slots
        return cls(bs, b, slots, tail_dst, win_slot + bs.wt, win_slot)


class BatchSlots:
    """R rows of static decode buffers over one document (and, without union, one table width)."""

    def __init__(self, runner, doc: DocKV, width: int, rows: int, capacity: int, union: bool = True):
        if union and rows > MAX_ROWS:
            raise ValueError(f"union attention takes at most {MAX_ROWS} rows, got {rows}")
        layout = doc.layout
        dev, dt = runner.device, runner.dtype
        self.runner, self.layout, self.width, self.rows, self.capacity = runner, layout, width, rows, capacity
        self.use_union = union
        self.start = doc.num_tokens
        self.num_pages = doc.num_pages
        self.k_pages, self.v_pages = doc.k_pages, doc.v_pages
        self.k_scales, self.v_scales = doc.k_scales, doc.v_scales  # empty unless the pages are quantised
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
        pin = dev.type == "cuda"
        self.inputs = torch.zeros(2 * rows, dtype=torch.long, device=dev)
        self._pin = pin
        # Each row's part of the flat tail / window buffers: the slot kernels' lower bounds.
        self._tail_base = torch.arange(rows, device=dev) * capacity
        self._win_base = torch.arange(rows, device=dev) * (self.wt + capacity)
        if union:
            n = doc.num_pages
            self.union = torch.zeros(n, dtype=torch.int32, device=dev)
            self.union_len = torch.zeros(1, dtype=torch.int32, device=dev)
            self.row_bits = torch.zeros(n, dtype=torch.int64, device=dev)
            self._member = np.zeros((rows, n), dtype=bool)  # which pages each row selected
            self._weights = (np.uint64(1) << np.arange(rows, dtype=np.uint64)).reshape(-1, 1)
        else:
            self.table = torch.zeros(rows, width, dtype=torch.int32, device=dev)
            self.num_blocks = torch.zeros(rows, dtype=torch.int32, device=dev)
        self._dirty = False
        self.lengths = [0] * rows  # tokens in each row's tail
        self.live = [False] * rows
        self.pages: list[tuple[int, ...] | None] = [None] * rows
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.failed: dict[int, str] = {}
        self.pool = None
        self.graph_bytes = 0
        self.union_pages = 0  # the union's size at the last step (reported by benchmarks)

    def nbytes(self) -> int:
        bufs = [*self.tail_k.values(), *self.tail_v.values(), *self.win_k.values(), *self.win_v.values()]
        return sum(t.numel() * t.element_size() for t in bufs) + self.graph_bytes

    # ------------------------------------------------------------------ rows
    def acquire(self, tail: QueryTail, pages: tuple[int, ...]) -> bool:
        """Give a free row to an eager tail (its K/V copied in); False when none is free or it won't fit."""
        if (not self.use_union and len(pages) > self.width) or tail.length >= self.capacity - 1:
            return False
        free = next((r for r in range(self.rows) if not self.live[r]), None)
        if free is None:
            return False
        n = tail.length
        for l in self.layout.global_layers:
            if n:
                self.tail_k[l][free, :n] = tail.k[l]
                self.tail_v[l][free, :n] = tail.v[l]
        for l in self.layout.sliding_layers:
            if n:
                self.win_k[l][free, self.wt : self.wt + n] = tail.k[l]
                self.win_v[l][free, self.wt : self.wt + n] = tail.v[l]
        # Taken only once its copies are in: a copy that raises leaves the row free and the tail as it was.
        self.live[free] = True
        self.lengths[free] = n
        self.load_pages(free, pages)
        tail.k, tail.v, tail.batch = {}, {}, RowBinding(self, free)
        return True

    @torch.inference_mode()  # the buffers are inference tensors; release() calls this from outside a forward
    def load_pages(self, row: int, pages: tuple[int, ...] | None) -> None:
        """Set a row's plan (None: no pages, a free row); a no-op when it has not changed."""
        if self.pages[row] is pages or self.pages[row] == pages:
            return
        self.pages[row] = pages
        if self.use_union:
            self._member[row] = False
            if pages:
                self._member[row, list(pages)] = True
            self._dirty = True
            return
        t = torch.zeros(self.width, dtype=torch.int32)
        if pages:
            t[: len(pages)] = torch.tensor(pages, dtype=torch.int32)
        self.table[row].copy_(t)
        self.num_blocks[row] = len(pages or ())

    def fits(self, pages: tuple[int, ...]) -> bool:
        return self.use_union or len(pages) <= self.width

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
        self.live[b.row] = False
        self.lengths[b.row] = 0
        self.load_pages(b.row, None)
        tail.batch = None

    @torch.inference_mode()
    def _sync_union(self) -> None:
        """The union of the rows' plans and each union page's row bits, to the device (async)."""
        if not self._dirty:
            return
        cols = np.flatnonzero(self._member.any(0))
        n = len(cols)
        bits = (self._member[:, cols].astype(np.uint64) * self._weights).sum(0, dtype=np.uint64)
        # Fresh pinned buffers: the pinned-memory cache keeps a block until its async copy has run.
        host = torch.empty(n + 1, dtype=torch.int32, pin_memory=self._pin)
        host[0] = n
        host[1:] = torch.from_numpy(cols.astype(np.int32))
        self.union_len.copy_(host[:1], non_blocking=self._pin)
        if n:
            hbits = torch.empty(n, dtype=torch.int64, pin_memory=self._pin)
            hbits.copy_(torch.from_numpy(bits.view(np.int64)))
            self.union[:n].copy_(host[1:], non_blocking=self._pin)
            self.row_bits[:n].copy_(hbits, non_blocking=self._pin)
        self.union_pages = n
        self._dirty = False

    # ------------------------------------------------------------------ decode
    def _forward(self, b: int) -> torch.Tensor:
        ids = self.inputs[:b]
        slots = self.inputs[self.rows : self.rows + b]
        step = BatchStaticStep.of(self, b, slots)
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

    def _prepare(self, tails: list[QueryTail], tokens: list[int]) -> tuple[list[int], int]:
        """The input buffer for one decode step of these tails (one async copy) and the union; (rows, b)."""
        rows = [t.batch.row for t in tails]
        b = row_bucket(max(rows) + 1, self.rows)
        host = torch.zeros(2 * self.rows, dtype=torch.long, pin_memory=self._pin)
        # Dummies write at their row's next free slot (0 for a free row): never read before
        # that row's next real token overwrites it.
        host[self.rows : self.rows + b] = torch.tensor([min(n, self.capacity - 1) for n in self.lengths[:b]])
        host[rows] = torch.tensor(tokens)
        self.inputs.copy_(host, non_blocking=self._pin)
        if self.use_union:
            self._sync_union()
        return rows, b

    def _run(self, b: int) -> torch.Tensor:
        """One forward of the first b rows from the input buffer: a graph replay once captured; (b, vocab)."""
        use_graphs = self.runner.query_mode == "graph"
        entry = self.graphs.get(b) if use_graphs else None
        if entry is not None:
            entry[0].replay()
            return entry[1]
        logits = self._forward(b)
        if use_graphs and b not in self.failed:
            self._capture(b)
        return logits

    def _advance(self, tails: list[QueryTail], k: int) -> None:
        for t in tails:
            t.length += k
            if self.live[t.batch.row]:
                self.lengths[t.batch.row] = t.length

    @torch.inference_mode()
    def decode(self, tails: list[QueryTail], tokens: list[int]) -> torch.Tensor:
        """One token for each of these bound tails in one forward; their logits (n, vocab), no host sync."""
        rows, b = self._prepare(tails, tokens)
        logits = self._run(b)
        if rows == list(range(len(rows))):
            out = logits[: len(rows)].clone()  # a copy: replays overwrite
        else:
            idx = torch.tensor(rows, dtype=torch.long, pin_memory=self._pin)
            out = logits.index_select(0, idx.to(logits.device, non_blocking=self._pin))
        self._advance(tails, 1)
        return out

    @torch.inference_mode()
    def decode_greedy(self, tails: list[QueryTail], tokens: list[int], k: int) -> torch.Tensor | None:
        """k greedy decode steps of these tails with no host sync between them: each step's argmax is
        the next step's input on the device. Their tokens (n, k) int64 on the device, or None when a
        tail has no room for k more tokens (the caller runs single steps).

        The host learns the tokens once per k steps (the engine loop's one sync), so the Python
        between two forwards (scheduling, sampling, postprocess: ~1 ms a step on a GPU host, a third
        of a 16-agent Gemma step) is paid once per k forwards. A row that stops early (an end
        token) still computes the rest of its window, which the loop drops; its tail is released."""
        if k < 1:
            raise ValueError(f"decode_greedy: k must be >= 1, got {k}")
        if any(self.lengths[t.batch.row] + k >= self.capacity - 1 for t in tails):
            return None
        rows, b = self._prepare(tails, tokens)
        dev = self.inputs.device
        idx = torch.tensor(rows, dtype=torch.long, pin_memory=self._pin).to(dev, non_blocking=self._pin)
        inc = torch.zeros(b, dtype=torch.long, pin_memory=self._pin)
        inc[rows] = 1  # only the stepping rows move to their next slot; dummies stay put
        inc = inc.to(dev, non_blocking=self._pin)
        out = torch.empty(len(rows), k, dtype=torch.long, device=dev)
        for i in range(k):
            tok = self._run(b).index_select(0, idx).argmax(-1)
            out[:, i] = tok
            if i + 1 < k:
                self.inputs[:b].index_copy_(0, idx, tok)
                self.inputs[self.rows : self.rows + b] += inc
        self._advance(tails, k)
        return out


def batch_static_attention(step: BatchStaticStep, layer: int, q, k, v, scale: float, softcap) -> torch.Tensor:
    """Attention of b rows' decode tokens (q (b, Hq, D)) for one layer, writing their K/V: one
    launch per part for all rows (their buffers as one flat buffer, each token bounded to its row)."""
    bs, b = step.bs, step.rows
    runner = bs.runner
    if layer in bs.layout.sliding_layers:
        keys, vals = bs.win_k[layer], bs.win_v[layer]
        flat_k, flat_v = keys.view(-1, *keys.shape[2:]), vals.view(-1, *vals.shape[2:])
        write_slots(flat_k, flat_v, step.win_dst, k, v, impl=runner.tail_impl, check=False)
        return attend_window(q, flat_k, flat_v, step.win_slot, bs.wt, bs.layout.window, scale, softcap,
                             impl=runner.window_impl, check=False, q_base=bs._win_base[:b])
    tk, tv = bs.tail_k[layer], bs.tail_v[layer]
    base = bs._tail_base[:b]
    flat_k, flat_v = tk.view(-1, *tk.shape[2:]), tv.view(-1, *tv.shape[2:])
    dst = step.tail_dst
    write_slots(flat_k, flat_v, dst, k, v, impl=runner.tail_impl, check=False)
    k_pool, v_pool = layer_pool(bs.k_pages, bs.k_scales, layer), layer_pool(bs.v_pages, bs.v_scales, layer)
    if bs.use_union:
        # Dummy rows have no bit: no page is read for them (out 0, lse -inf).
        o_pages, l_pages = attend_union(q, k_pool, v_pool, bs.union, bs.union_len,
                                        bs.row_bits, bs.slot_lens, scale, softcap, impl=runner.union_impl,
                                        check=False)
    else:
        o4, l3 = attend_selected(q.unsqueeze(1), k_pool, v_pool, bs.table[:b],
                                 bs.num_blocks[:b], bs.slot_lens, scale, softcap=softcap, impl=runner.kernel_impl)
        o_pages, l_pages = o4[:, 0], l3[:, 0]
    return attend_tail_merged(q, flat_k, flat_v, dst, o_pages, l_pages, scale, softcap, impl=runner.tail_impl,
                              check=False, q_base=base)
