"""One forward over the pending work of many queries: decode tokens and prompt chunks, packed.

The engine loop (serving/engine/loop.py) hands each step a list of :class:`Row`: a query's tail
and the tokens to append to it (one for a decode step, up to a chunk of a prompt). Rows may
be over different documents and different page sets. :func:`run_rows` packs every eager row's
tokens into one sequence (1, sum T) and runs the model once over it: embeddings, norms,
projections and MLPs see all tokens together, so the weights are read once per step; the
attention hook (``ModelRunner``'s ``PackedStep``) attends each row's span over that row's own
pages and tail, the one-token rows of a document together (serving/runner/packed_attention.py).
Positions are each row's own (RoPE is per token), so a row computes what it would alone, up
to floating-point rounding of the larger matrix products.

In static and CUDA-graph query mode (the GPU path) decode rows run in static batched rows
(serving/runner/batch_slots.py): one forward (a graph replay) for all decode rows over one document
and table width. Prompt chunks and option-scoring rows run one by one through the document's
``QuerySlots`` (serving/runner/static_query.py, their own graphs), with the tail copied in and back
out, so between steps a tail not decoding lives in ordinary tensors and no other query can
clobber it. A tail that outgrows its slots runs eagerly.

Atomicity: every row writes a shadow of its tail; tails change only when the whole packed
forward succeeded, so a failed step can be re-run row by row (the scheduler does) and a
bad row fails alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from agentctx.serving.runner.batch_slots import BatchSlots
from agentctx.serving.runner.model_runner import ModelRunner
from agentctx.serving.runner.packed_attention import ExtendStep, PackedStep, decode_groups
from agentctx.serving.runner.paged_kv import DocKV, QueryTail
from agentctx.serving.runner.static_query import BUCKETS, table_width

__all__ = ["Row", "StepOutput", "run_step", "run_greedy_steps", "run_rows", "release", "LOGITS"]

# What a row wants back: the last token's logits, every new token's (option scoring), none (a
# prompt chunk that is not the prompt's last), or "greedy": the last token's logits where they
# can decide a greedy pick, -inf elsewhere (their argmax is the full row's;
# ``ModelRunner.greedy_from_hidden``), for requests that only take the argmax.
LOGITS = ("last", "all", "none", "greedy")


@dataclass
class Row:
    """Tokens to append to one query's tail in this step.

    ``pages``: sorted distinct page indices of ``doc`` (None = every page); checked against the
    document unless ``checked`` (the engine loop checks a request's plan once, not every step).
    ``logit_ids``: with ``want="last"``, only these tokens' logits are computed
    (``ModelRunner.logits_for``); :func:`run_step` returns them in a full row, -inf elsewhere.
    """

    doc: DocKV
    tail: QueryTail
    token_ids: list[int]
    pages: tuple[int, ...] | None = None
    want: str = "last"
    logit_ids: list[int] | None = None
    checked: bool = False
    # Tokens its tail will hold in all (prompt + new tokens), when known: on the static path a
    # tail that will outgrow the shared query slots gets slots of its own from its first chunk.
    reserve: int = 0
    sel: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError("a row needs at least one token")
        if self.want not in LOGITS:
            raise ValueError(f"want must be one of {LOGITS}, got {self.want!r}")
        if self.logit_ids is not None and (self.want != "last" or not self.logit_ids):
            raise ValueError("logit_ids must be a non-empty list and only go with want='last'")
        if self.checked:
            self.sel = self.doc.all_pages if self.pages is None else self.pages
        else:
            self.sel = ModelRunner.selected_pages(self.doc, self.pages)


@dataclass
class StepOutput:
    """What one forward returns. ``last`` (m, V) fp32 holds the last-token logits of every row
    that wants them (``want`` last or greedy; a ``logit_ids`` row as a full row, -inf outside
    its ids), on the model's device; ``index[i]`` is row i's row of ``last`` (-1: none).
    ``all[i]``: (T, V) logits of every new token of a ``want="all"`` row."""

    last: torch.Tensor | None
    index: list[int]
    all: dict[int, torch.Tensor] = field(default_factory=dict)
    logit_ids: dict[int, list[int]] = field(default_factory=dict)

    def row(self, i: int) -> torch.Tensor | None:
        """Row i's result as :func:`run_rows` gives it: (V,), (T, V), (len(logit_ids),) or None."""
        if i in self.all:
            return self.all[i]
        j = self.index[i]
        if j < 0:
            return None
        ids = self.logit_ids.get(i)
        row = self.last[j]
        return row if ids is None else row[torch.as_tensor(ids, device=row.device)]


def run_rows(runner: ModelRunner, rows: list[Row]) -> list[torch.Tensor | None]:
    """Append every row's tokens; returns per row what it wants: (vocab,), (T, vocab),
    (len(logit_ids),) or None. Raises (tails unchanged for eager rows) if the forward fails."""
    out = run_step(runner, rows)
    return [out.row(i) for i in range(len(rows))]


def run_step(runner: ModelRunner, rows: list[Row]) -> StepOutput:
    """The same forward, its last-token logits stacked for the engine loop's batched sampler."""
    if len({id(r.tail) for r in rows}) != len(rows):
        raise ValueError("run_rows got the same query tail twice")
    if runner.query_mode != "eager":
        return _run_static(runner, rows)
    if any(r.tail.static is not None or r.tail.batch is not None for r in rows):
        raise ValueError("eager query mode got a tail bound to static slots")
    return _packed(runner, rows)


def _assemble(n: int, parts: list[tuple[list[int], torch.Tensor]], rows: list[Row],
              all_rows: dict[int, torch.Tensor]) -> StepOutput:
    """One StepOutput from pieces (row indices, their (k, V) last logits)."""
    index = [-1] * n
    tensors = []
    at = 0
    for idx, t in parts:
        for j, i in enumerate(idx):
            index[i] = at + j
        at += len(idx)
        tensors.append(t)
    last = None if not tensors else tensors[0] if len(tensors) == 1 else torch.cat(tensors)
    ids = {i: r.logit_ids for i, r in enumerate(rows) if r.logit_ids is not None}
    return StepOutput(last, index, all_rows, ids)


def _full_row(logits: torch.Tensor, ids: list[int], vocab: int) -> torch.Tensor:
    """(1, vocab): logits (len(ids),) at ids, -inf elsewhere."""
    row = torch.full((1, vocab), float("-inf"), dtype=torch.float32, device=logits.device)
    row[0, torch.as_tensor(ids, device=logits.device)] = logits.float()
    return row


@torch.inference_mode()
def run_greedy_steps(runner: ModelRunner, rows: list[Row], k: int) -> torch.Tensor | None:
    """k greedy decode steps of one-token rows in one document's batched static rows, fed on the
    device (serving/runner/batch_slots.py ``decode_greedy``): their tokens (n, k) on the device, or
    None where that does not apply (eager mode, a prompt or constrained row, rows in several
    batches, a tail without room); the caller then runs :func:`run_step`."""
    if runner.query_mode == "eager" or not rows or len({id(r.tail) for r in rows}) != len(rows):
        return None
    if any(len(r.token_ids) != 1 or r.want not in ("last", "greedy") or r.logit_ids is not None for r in rows):
        return None
    slots = {id(bs): bs for bs in (_decode_slots(runner, r) for r in rows)}
    if len(slots) != 1 or None in slots.values():
        return None
    bs = next(iter(slots.values()))
    return bs.decode_greedy([r.tail for r in rows], [r.token_ids[0] for r in rows], k)


def release(tail: QueryTail) -> None:
    """Give back the batched decode row or the long-prompt slots a finished request's tail holds."""
    if tail.batch is not None:
        tail.batch.slots.release(tail)
    if tail.static is not None and tail.static.slots.held_by is tail:
        tail.static.slots.held_by = None
        tail.static = None


@torch.inference_mode()
def _run_static(runner: ModelRunner, rows: list[Row]) -> StepOutput:
    parts: list[tuple[list[int], torch.Tensor]] = []
    all_rows: dict[int, torch.Tensor] = {}
    decode: dict[int, tuple[BatchSlots, list[int]]] = {}
    for i, r in enumerate(rows):
        bs = _decode_slots(runner, r) if len(r.token_ids) == 1 and r.want in ("last", "greedy") else None
        if bs is not None:
            decode.setdefault(id(bs), (bs, []))[1].append(i)
            continue
        logits = _through_query_slots(runner, r)
        if r.want == "all":
            all_rows[i] = logits
        elif r.want != "none":
            parts.append(([i], _as_last(runner, r, logits)))
    for bs, idx in decode.values():
        logits = bs.decode([rows[i].tail for i in idx], [rows[i].token_ids[0] for i in idx])
        ids = [rows[i].logit_ids for i in idx]
        if any(x is not None for x in ids):  # a constrained row sees only its ids
            logits = logits.clone()
            for j, x in enumerate(ids):
                if x is not None:
                    logits[j : j + 1] = _full_row(logits[j, torch.as_tensor(x, device=logits.device)], x,
                                                  logits.shape[1])
        parts.append((idx, logits))
    return _assemble(len(rows), parts, rows, all_rows)


def _as_last(runner: ModelRunner, r: Row, logits: torch.Tensor) -> torch.Tensor:
    """(1, V) last logits of a row run alone (a logit_ids row as a full row)."""
    if r.logit_ids is not None:
        return _full_row(logits[torch.as_tensor(r.logit_ids, device=logits.device)], r.logit_ids, logits.shape[-1])
    return logits.view(1, -1)


def _decode_slots(runner: ModelRunner, r: Row) -> BatchSlots | None:
    """The batched rows this decode row runs in (binding its tail on first use), or None."""
    tail = r.tail
    sel = r.sel
    if tail.static is not None:  # a long prompt's own slots: it decodes there too
        return None
    if tail.batch is not None:
        bs = tail.batch.slots
        if tail.length < bs.capacity - 1 and bs.fits(sel):
            bs.load_pages(tail.batch.row, sel)  # a no-op unless the plan changed
            return bs
        bs.materialize(tail)  # outgrew its row: ordinary tensors from now on
    if tail.length + 1 >= runner.batch_tail_tokens:
        return None
    bs = runner.batch_slots_for(r.doc, table_width(len(sel)))
    return bs if bs.acquire(tail, sel) else None


def _through_query_slots(runner: ModelRunner, r: Row) -> torch.Tensor | None:
    """One row in the document's QuerySlots (its graphs); the tail stays in ordinary tensors.

    A long prompt (its tail will outgrow the shared slots) instead runs in slots of its own,
    held from its first chunk to its end: chunk after chunk, then its decode tokens, each a
    graph replay, nothing copied in or out (``ModelRunner.long_slots_for``)."""
    tail = r.tail
    sel = r.sel
    all_logits = r.want == "all"
    if tail.static is not None and tail.static.slots.held_by is tail:
        qs = tail.static.slots
        qs.check(tail)
        qs.load_pages(sel)
        return qs.run(tail, r.token_ids, all_logits=all_logits)
    if tail.batch is not None:
        tail.batch.slots.materialize(tail)
    if tail.length == 0 and r.reserve + BUCKETS[-1] > runner.static_tail_tokens:
        qs = runner.long_slots_for(r.doc, table_width(len(sel)), r.reserve)
        qs.bind(tail)
        qs.held_by = tail
        qs.load_pages(sel)
        return qs.run(tail, r.token_ids, all_logits=all_logits)
    qs = runner.query_slots_for(r.doc, table_width(len(sel)))
    n = tail.length
    if n + len(r.token_ids) + BUCKETS[-1] > qs.capacity:
        return _packed(runner, [r]).row(0)
    proxy = QueryTail(tail.start)
    qs.bind(proxy)
    for l in qs.layout.global_layers:
        if n:
            qs.tail_k[l][:n], qs.tail_v[l][:n] = tail.k[l], tail.v[l]
    for l in qs.layout.sliding_layers:
        if n:
            qs.win_k[l][qs.wt : qs.wt + n], qs.win_v[l][qs.wt : qs.wt + n] = tail.k[l], tail.v[l]
    proxy.length = n
    qs.load_pages(sel)
    logits = qs.run(proxy, r.token_ids, all_logits=all_logits)
    qs.materialize(proxy)  # copies the tail out: the next query over this document may take the slots
    tail.k, tail.v, tail.length = proxy.k, proxy.v, proxy.length
    return logits


@torch.inference_mode()
def _packed(runner: ModelRunner, rows: list[Row]) -> StepOutput:
    dev = runner.device
    steps, spans, ids, positions = [], [], [], []
    start = 0
    for r in rows:
        table = torch.tensor(r.sel, dtype=torch.int32, device=dev).view(1, -1)
        count = torch.tensor([len(r.sel)], dtype=torch.int32, device=dev)
        n = len(r.token_ids)
        first = r.tail.start + r.tail.length
        pos = torch.arange(first, first + n, device=dev)
        # A shadow of the tail's dicts: attention replaces entries, never writes tensors in place.
        shadow = QueryTail(r.tail.start, dict(r.tail.k), dict(r.tail.v), r.tail.length)
        steps.append(ExtendStep(r.doc, shadow, pos, table, count, r.doc.slot_lens(), runner.kernel_impl))
        spans.append((start, start + n))
        ids.extend(r.token_ids)
        positions.append(pos)
        start += n
    packed_ids = torch.tensor(ids, dtype=torch.long).view(1, -1)
    groups = decode_groups(steps, spans, runner.config.num_attention_heads) if runner.group_decode_rows else []
    hidden = runner._hidden_rows(packed_ids, torch.cat(positions).view(1, -1), PackedStep(steps, spans, groups))[0]
    for r, st in zip(rows, steps):
        r.tail.k, r.tail.v = st.tail.k, st.tail.v
        r.tail.length += len(r.token_ids)
    # One output-head product for every row that wants its last token's full logits, one greedy
    # head pass for those that take only the argmax, and the few logits of constrained rows.
    parts: list[tuple[list[int], torch.Tensor]] = []
    for kind, head in (("last", runner.logits_from_hidden), ("greedy", runner.greedy_from_hidden)):
        idx = [i for i, r in enumerate(rows) if r.want == kind and r.logit_ids is None]
        if idx:
            last = torch.tensor([spans[i][1] - 1 for i in idx], device=hidden.device)
            parts.append((idx, head(hidden.index_select(0, last))))
    all_rows: dict[int, torch.Tensor] = {}
    vocab = runner.model.lm_head.weight.shape[0]
    for i, r in enumerate(rows):
        s, e = spans[i]
        if r.want == "all":
            all_rows[i] = runner.logits_from_hidden(hidden[s:e])
        elif r.logit_ids is not None:
            parts.append(([i], _full_row(runner.logits_for(hidden[e - 1], r.logit_ids), r.logit_ids, vocab)))
    return _assemble(len(rows), parts, rows, all_rows)
