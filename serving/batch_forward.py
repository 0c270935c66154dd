"""One forward over the pending work of many queries: decode tokens and prompt chunks, packed.

The scheduler (serving/scheduler.py) hands each step a list of :class:`Row`: a query's tail
and the tokens to append to it (one for a decode step, up to a chunk of a prompt). Rows may
be over different documents and different page sets. :func:`run_rows` packs every eager row's
tokens into one sequence (1, sum T) and runs the model once over it: embeddings, norms,
projections and MLPs see all tokens together, so the weights are read once per step; the
attention hook (``ModelRunner``'s ``PackedStep``) attends each row's span over that row's own
pages and tail, the one-token rows of a document together (serving/packed_attention.py).
Positions are each row's own (RoPE is per token), so a row computes what it would alone, up
to floating-point rounding of the larger matrix products.

In static and CUDA-graph query mode (the GPU path) decode rows run in static batched rows
(serving/batch_slots.py): one forward (a graph replay) for all decode rows over one document
and table width. Prompt chunks and option-scoring rows run one by one through the document's
``QuerySlots`` (serving/static_query.py, their own graphs), with the tail copied in and back
out, so between steps a tail not decoding lives in ordinary tensors and no other query can
clobber it. A tail that outgrows its slots runs eagerly.

Atomicity: every row writes a shadow of its tail; tails change only when the whole packed
forward succeeded, so a failed step can be re-run row by row (the scheduler does) and a
bad row fails alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentctx.serving.batch_slots import BatchSlots
from agentctx.serving.model_runner import ModelRunner
from agentctx.serving.packed_attention import ExtendStep, PackedStep, decode_groups
from agentctx.serving.paged_kv import DocKV, QueryTail
from agentctx.serving.static_query import BUCKETS, table_width

__all__ = ["Row", "run_rows", "release", "LOGITS"]

# What a row wants back: the last token's logits, every new token's (option scoring), none (a
# prompt chunk that is not the prompt's last), or "greedy": the last token's logits where they
# can decide a greedy pick, -inf elsewhere (their argmax is the full row's;
# ``ModelRunner.greedy_from_hidden``), for requests that only take the argmax.
LOGITS = ("last", "all", "none", "greedy")


@dataclass
class Row:
    """Tokens to append to one query's tail in this step.

    ``pages``: sorted distinct page indices of ``doc`` (None = every page). ``logit_ids``: with
    ``want="last"``, only these tokens' logits (``ModelRunner.logits_for``), (len(ids),) fp32.
    """

    doc: DocKV
    tail: QueryTail
    token_ids: list[int]
    pages: tuple[int, ...] | None = None
    want: str = "last"
    logit_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError("a row needs at least one token")
        if self.want not in LOGITS:
            raise ValueError(f"want must be one of {LOGITS}, got {self.want!r}")
        if self.logit_ids is not None and (self.want != "last" or not self.logit_ids):
            raise ValueError("logit_ids must be a non-empty list and only go with want='last'")


def run_rows(runner: ModelRunner, rows: list[Row]) -> list[torch.Tensor | None]:
    """Append every row's tokens; returns per row what it wants: (vocab,), (T, vocab),
    (len(logit_ids),) or None. Raises (tails unchanged for eager rows) if the forward fails."""
    if len({id(r.tail) for r in rows}) != len(rows):
        raise ValueError("run_rows got the same query tail twice")
    if runner.query_mode != "eager":
        return _run_static(runner, rows)
    if any(r.tail.static is not None or r.tail.batch is not None for r in rows):
        raise ValueError("eager query mode got a tail bound to static slots")
    return _packed(runner, rows)


def release(tail: QueryTail) -> None:
    """Give back the batched decode row a finished request's tail holds, if any."""
    if tail.batch is not None:
        tail.batch.slots.release(tail)


def _pick(r: Row, logits: torch.Tensor | None) -> torch.Tensor | None:
    if r.want == "none":
        return None
    if r.logit_ids is not None:
        return logits[torch.as_tensor(r.logit_ids, device=logits.device)]
    return logits


@torch.inference_mode()
def _run_static(runner: ModelRunner, rows: list[Row]) -> list[torch.Tensor | None]:
    out: list[torch.Tensor | None] = [None] * len(rows)
    decode: dict[int, tuple[BatchSlots, list[int]]] = {}
    for i, r in enumerate(rows):
        bs = _decode_slots(runner, r) if len(r.token_ids) == 1 and r.want in ("last", "greedy") else None
        if bs is not None:
            decode.setdefault(id(bs), (bs, []))[1].append(i)
        else:
            out[i] = _through_query_slots(runner, r)
    for bs, idx in decode.values():
        logits = bs.decode([rows[i].tail for i in idx], [rows[i].token_ids[0] for i in idx])
        for j, i in enumerate(idx):
            out[i] = _pick(rows[i], logits[j])
    return out


def _decode_slots(runner: ModelRunner, r: Row) -> BatchSlots | None:
    """The batched rows this decode row runs in (binding its tail on first use), or None."""
    tail = r.tail
    sel = runner.selected_pages(r.doc, r.pages)
    if tail.batch is not None:
        bs = tail.batch.slots
        if tail.length < bs.capacity - 1 and len(sel) <= bs.width:
            bs._load_pages(tail.batch.row, sel)
            return bs
        bs.materialize(tail)  # outgrew its row: ordinary tensors from now on
    if tail.length + 1 >= runner.batch_tail_tokens:
        return None
    bs = runner.batch_slots_for(r.doc, table_width(len(sel)))
    return bs if bs.acquire(tail, sel) else None


def _through_query_slots(runner: ModelRunner, r: Row) -> torch.Tensor | None:
    """One row in the document's QuerySlots (its graphs); the tail stays in ordinary tensors."""
    tail = r.tail
    if tail.batch is not None:
        tail.batch.slots.materialize(tail)
    sel = runner.selected_pages(r.doc, r.pages)
    qs = runner.query_slots_for(r.doc, table_width(len(sel)))
    n = tail.length
    if n + len(r.token_ids) + BUCKETS[-1] > qs.capacity:
        return _packed(runner, [r])[0]
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
    logits = qs.run(proxy, r.token_ids, all_logits=r.want == "all")
    qs.materialize(proxy)  # copies the tail out: the next query over this document may take the slots
    tail.k, tail.v, tail.length = proxy.k, proxy.v, proxy.length
    return _pick(r, logits)


@torch.inference_mode()
def _packed(runner: ModelRunner, rows: list[Row]) -> list[torch.Tensor | None]:
    dev = runner.device
    steps, spans, ids, positions = [], [], [], []
    start = 0
    for r in rows:
        table, count = runner.block_table(r.doc, r.pages)
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
    out: list[torch.Tensor | None] = [None] * len(rows)
    # One output-head product for every row that wants its last token's full logits, and one
    # greedy head pass for those that take only the argmax.
    for kind, head in (("last", runner.logits_from_hidden), ("greedy", runner.greedy_from_hidden)):
        idx = [i for i, r in enumerate(rows) if r.want == kind and r.logit_ids is None]
        if idx:
            last = torch.tensor([spans[i][1] - 1 for i in idx], device=hidden.device)
            for i, logits in zip(idx, head(hidden.index_select(0, last))):
                out[i] = logits
    for i, r in enumerate(rows):
        s, e = spans[i]
        if r.want == "all":
            out[i] = runner.logits_from_hidden(hidden[s:e])
        elif r.logit_ids is not None:
            out[i] = runner.logits_for(hidden[e - 1], r.logit_ids)
    return out
