"""Static-shape query forwards over a paged document, replayable as CUDA graphs.

A decode forward of a small model is thousands of tiny kernels (2005 for Gemma 3
270M), so on a GPU its time is host launch overhead, not attention: ~29 ms per
forward eager on an H200 against 1-4 ms of attention (BENCHMARKS.md §4). Giving a
query's forwards static shapes lets us capture each one once and replay it with
a single launch. What makes the shapes static:

* The query's private tail lives in preallocated per-layer buffers of C slots.
  New tokens are written with ``index_copy_`` at slot indices held on the device,
  and a token sees the tail slots up to its own, decided on the device from those
  indices (kernels/tail_merge.py): no host sync, no ``torch.cat`` growth.
* Sliding-window layers keep the document's window and the tail in one buffer
  (window first, positions contiguous), so each query token sees one band of it: one
  kernel call on CUDA (kernels/tail_merge.attend_window), band-masked SDPA elsewhere.
* The block table is a fixed-width buffer (width rounded up, see ``table_width``);
  the page kernel reads only ``num_blocks`` entries of it.
* The number of new tokens is padded up to a bucket (1, 8, 16, ... 256). Pad
  tokens sit after the real ones, so causality hides them from real tokens, and
  the slots they write are overwritten by later real tokens before anything can
  see them.

A :class:`QuerySlots` holds these buffers for one document and one table width,
and the graphs captured per bucket; queries over the same document take turns on
it (the engine serialises forwards). A tail bound to it carries an owner number;
a tail whose slots were taken by a newer query fails loudly instead of reading
another query's tokens.

On CPU (tests) and when a capture fails, the same static forward runs eagerly.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import torch

from agentctx.kernels import attend_selected, merge_attention
from agentctx.kernels.tail_merge import attend_tail_merged, attend_window
from agentctx.serving.runner.paged_kv import DocKV, QueryTail
from agentctx.serving.runner.quant_kv import layer_pool

__all__ = ["QuerySlots", "StaticStep", "TailBinding", "static_attention", "bucket_for", "table_width", "BUCKETS"]

log = logging.getLogger(__name__)

# Token-count buckets: 1 for decode, then powers of two for prompts; longer inputs go in
# chunks of the largest bucket. Fewer, coarser buckets mean fewer captures per document.
BUCKETS = (1, 8, 16, 32, 64, 128, 256)
_owners = itertools.count(1)


def bucket_for(n: int) -> int:
    """Smallest bucket holding n new tokens (n <= BUCKETS[-1])."""
    return next(b for b in BUCKETS if b >= n)


def table_width(m: int) -> int:
    """Block-table width for m selected pages: m rounded up by at most 1/8.

    Queries at one budget select about the same number of pages; rounding lets them
    share one set of graphs while the kernel wastes at most ~12% of its programs on
    padding (it launches splits for the full width, and those past num_blocks exit).
    """
    if m <= 16:
        return 16
    step = 1 << max(0, m.bit_length() - 4)
    return -(-m // step) * step


@dataclass
class TailBinding:
    """Ties a :class:`QueryTail` to the slots it lives in."""

    slots: "QuerySlots"
    owner: int


@dataclass
class StaticStep:
    """The per-forward state the attention hook reads (built inside the captured region)."""

    qs: "QuerySlots"
    slots: torch.Tensor  # (Tb,) int64 tail slot of each new token (it sees tail slots 0..slot)


class QuerySlots:
    """Preallocated tail buffers, inputs and captured graphs for queries over one document."""

    def __init__(self, runner, doc: DocKV, width: int, capacity: int):
        layout = doc.layout
        dev, dt = runner.device, runner.dtype
        self.runner = runner
        self.layout = layout
        self.width = width
        self.capacity = capacity
        self.start = doc.num_tokens  # tail slot j holds position start + j
        # References to the document's tensors, not to the DocKV: the DocKV owns us.
        self.k_pages, self.v_pages = doc.k_pages, doc.v_pages
        self.k_scales, self.v_scales = doc.k_scales, doc.v_scales  # empty unless the pages are quantised
        self.slot_lens = doc.slot_lens()
        shape = (capacity, layout.num_kv_heads, layout.head_dim)
        self.tail_k = {l: torch.zeros(shape, dtype=dt, device=dev) for l in layout.global_layers}
        self.tail_v = {l: torch.zeros(shape, dtype=dt, device=dev) for l in layout.global_layers}
        self.win_k: dict[int, torch.Tensor] = {}
        self.win_v: dict[int, torch.Tensor] = {}
        self.wt = 0  # window entries before the tail in the sliding layers' buffers
        if layout.sliding_layers:
            self.wt = int(doc.window_pos.numel())
            for l in layout.sliding_layers:
                self.win_k[l] = torch.cat([doc.window_k[l], torch.zeros(shape, dtype=dt, device=dev)])
                self.win_v[l] = torch.cat([doc.window_v[l], torch.zeros(shape, dtype=dt, device=dev)])
        tmax = BUCKETS[-1]
        self.tmax = tmax
        # One int64 input buffer, copied from the host once per forward:
        # [0, tmax) token ids, [tmax, 2 tmax) tail slots, [2 tmax] row of the last real token.
        self.inputs = torch.zeros(2 * tmax + 1, dtype=torch.long, device=dev)
        self.table = torch.zeros(1, width, dtype=torch.int32, device=dev)
        self.num_blocks = torch.zeros(1, dtype=torch.int32, device=dev)
        self.loaded_pages: tuple[int, ...] | None = None
        self.owner = 0
        self.held_by = None  # the one tail of a long prompt that holds these slots (ModelRunner.long_slots_for)
        # A long prompt's tail is read as pages too (see static_attention): its whole pages
        # through the page kernel, only the last partial page and the chunk by the slot kernel.
        self.paged_tail = False
        p = doc.page_size
        self.tail_page = p
        if capacity % p == 0:
            self.tail_table = torch.arange(capacity // p, dtype=torch.int32, device=dev).view(1, -1)
            self.tail_lens = torch.full((capacity // p,), p, dtype=torch.int32, device=dev)
        self._pin = dev.type == "cuda"
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.failed: dict[int, str] = {}  # bucket -> why its capture failed (it then runs eagerly)
        self.pool = None  # one memory pool for all of this set's graphs (they never run at once)
        # Growth of reserved device memory across captures: the pool's segments, an upper
        # bound (the engine serialises forwards, so nothing else allocates meanwhile).
        self.graph_bytes = 0

    def nbytes(self) -> int:
        """Bytes of the preallocated buffers plus device memory reserved while capturing graphs."""
        bufs = [*self.tail_k.values(), *self.tail_v.values(), *self.win_k.values(), *self.win_v.values()]
        return sum(t.numel() * t.element_size() for t in bufs) + self.graph_bytes

    # ------------------------------------------------------------------ binding
    def bind(self, tail: QueryTail) -> None:
        """Give these slots to a fresh tail; any tail bound before becomes stale."""
        self.owner = next(_owners)
        tail.static = TailBinding(self, self.owner)

    def check(self, tail: QueryTail) -> None:
        b = tail.static
        if b is None or b.slots is not self or b.owner != self.owner:
            raise RuntimeError(
                "query tail is stale: a newer query over this document reused its slots; "
                "finish one query before starting the next (the engine serialises forwards)"
            )

    def load_pages(self, pages: tuple[int, ...]) -> None:
        if pages == self.loaded_pages:
            return
        m = len(pages)
        if m > self.width:
            raise ValueError(f"{m} pages do not fit a block table of width {self.width}")
        row = torch.zeros(self.width, dtype=torch.int32)
        row[:m] = torch.tensor(pages, dtype=torch.int32)
        self.table.copy_(row.view(1, -1))
        self.num_blocks.fill_(m)
        self.loaded_pages = pages

    def materialize(self, tail: QueryTail) -> None:
        """Copy a bound tail into ordinary per-layer tensors (the eager path's form) and unbind it."""
        self.check(tail)
        n = tail.length
        for l in self.layout.global_layers:
            tail.k[l], tail.v[l] = self.tail_k[l][:n].clone(), self.tail_v[l][:n].clone()
        for l in self.layout.sliding_layers:
            tail.k[l] = self.win_k[l][self.wt : self.wt + n].clone()
            tail.v[l] = self.win_v[l][self.wt : self.wt + n].clone()
        tail.static = None

    # ------------------------------------------------------------------ forward
    def _forward(self, tb: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The static forward for a bucket of tb tokens; everything here may be captured."""
        ids = self.inputs[:tb]
        slots = self.inputs[self.tmax : self.tmax + tb]
        last = self.inputs[2 * self.tmax :]
        qpos = slots + self.start
        step = StaticStep(self, slots)
        hidden = self.runner._hidden(ids, qpos, step)
        logits = self.runner.logits_from_hidden(hidden.index_select(0, last))[0]
        return hidden, logits

    def _capture(self, tb: int) -> None:
        dev = self.inputs.device
        try:
            graph = torch.cuda.CUDAGraph()
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            before = torch.cuda.memory_reserved(dev)
            # thread_local: in a replica, other threads (store loads, the HTTP side) may use
            # CUDA while this one captures; "global" would turn their calls into errors.
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                hidden, logits = self._forward(tb)
        except Exception as exc:  # noqa: BLE001 - any capture failure: stay correct, run eagerly
            self.failed[tb] = f"{type(exc).__name__}: {exc}"
            log.warning("CUDA graph capture for %d-token forwards failed (%s: %s); running them eagerly",
                        tb, type(exc).__name__, exc)
            return
        self.graphs[tb] = (graph, hidden, logits)
        self.graph_bytes += max(0, torch.cuda.memory_reserved(dev) - before)

    def run(self, tail: QueryTail, ids: list[int], all_logits: bool) -> torch.Tensor:
        """Append ids to a bound tail. Returns last-token logits (vocab,) or (T, vocab) with all_logits."""
        self.check(tail)
        rows = []
        logits = None
        for s in range(0, len(ids), self.tmax):
            chunk = ids[s : s + self.tmax]
            t = len(chunk)
            tb = bucket_for(t)
            base = tail.length
            # Pinned, fresh per chunk: torch's pinned-memory cache does not hand a block out again
            # before the asynchronous copy that reads it has run.
            host = torch.zeros(2 * self.tmax + 1, dtype=torch.long, pin_memory=self._pin)
            host[:t] = torch.tensor(chunk, dtype=torch.long)
            # Pad tokens take the slots after the real ones (see the module docstring).
            host[self.tmax : self.tmax + tb] = torch.arange(base, base + tb)
            host[2 * self.tmax] = t - 1
            self.inputs.copy_(host, non_blocking=self._pin)
            # Captured graphs are used only in "graph" mode, so a runner switched to
            # "static" (or a benchmark comparing modes) really runs the static forward.
            use_graphs = self.runner.query_mode == "graph"
            entry = self.graphs.get(tb) if use_graphs else None
            if entry is not None:
                entry[0].replay()
                hidden, logits = entry[1], entry[2]
            else:
                hidden, logits = self._forward(tb)
                if use_graphs and tb not in self.failed:
                    self._capture(tb)
            if all_logits:
                rows.append(self.runner.logits_from_hidden(hidden[:t]))
            tail.length += t
        if all_logits:
            return torch.cat(rows)
        return logits.clone()  # the graph's output buffer is overwritten by the next replay


def static_attention(step: StaticStep, layer: int, q, k, v, scale: float, softcap) -> torch.Tensor:
    """Attention of tb new tokens for one layer, writing their K/V into the tail slots."""
    qs = step.qs
    layout = qs.layout
    if layer in layout.sliding_layers:
        keys, vals = qs.win_k[layer], qs.win_v[layer]
        dst = step.slots + qs.wt
        keys.index_copy_(0, dst, k)
        vals.index_copy_(0, dst, v)
        return attend_window(q, keys, vals, step.slots, qs.wt, layout.window, scale, softcap,
                             impl=qs.runner.window_impl, check=False)
    tk, tv = qs.tail_k[layer], qs.tail_v[layer]
    tk.index_copy_(0, step.slots, k)
    tv.index_copy_(0, step.slots, v)
    o_pages, l_pages = attend_selected(
        q.unsqueeze(0), layer_pool(qs.k_pages, qs.k_scales, layer), layer_pool(qs.v_pages, qs.v_scales, layer),
        qs.table, qs.num_blocks, qs.slot_lens,
        scale, softcap=softcap, impl=qs.runner.kernel_impl,
    )
    o_pages, l_pages = o_pages[0], l_pages[0]
    base = None
    if qs.paged_tail:
        # A long tail: the whole pages before this chunk's first token are visible to every token
        # of the chunk, so they go through the page kernel (split-K over many programs, bf16 tensor
        # cores); the slot kernel then streams only from that page boundary to each token. Streamed
        # whole by the slot kernel, a 32K-token tail cost ~40 ms per 256-token chunk on an H100.
        p = qs.tail_page
        whole = (step.slots[:1] // p).to(torch.int32)  # (1,) pages wholly before the chunk
        shape = (-1, p, *tk.shape[1:])
        o_tail, l_tail = attend_selected(q.unsqueeze(0), tk.view(shape), tv.view(shape), qs.tail_table, whole,
                                         qs.tail_lens, scale, softcap=softcap, impl=qs.runner.kernel_impl)
        o_pages, l_pages = merge_attention(o_pages, l_pages, o_tail[0], l_tail[0])
        base = (whole.long() * p).expand(q.shape[0])
    # The query's own tokens and the merge with the page partial: one kernel on CUDA
    # (kernels/tail_merge.py) instead of ~40 small ones per layer.
    return attend_tail_merged(q, tk, tv, step.slots, o_pages, l_pages, scale, softcap,
                              impl=qs.runner.tail_impl, check=False, q_base=base)
