"""One forward over the pending work of many queries: decode tokens and prompt chunks, packed.

The scheduler (serving/scheduler.py) hands each step a list of :class:`Row`: a query's tail
and the tokens to append to it (one for a decode step, up to a chunk of a prompt). Rows may
be over different documents and different page sets. :func:`run_rows` packs every eager row's
tokens into one sequence (1, sum T) and runs the model once over it: embeddings, norms,
projections and MLPs see all tokens together, so the weights are read once per step; the
attention hook (``ModelRunner``'s ``PackedStep``) attends each row's span over that row's own
pages and tail. Positions are each row's own (RoPE is per token), so a row computes what it
would alone, up to floating-point rounding of the larger matrix products.

In static and CUDA-graph query mode (serving/static_query.py) each row runs through
``ModelRunner.extend``, its own forward (a graph replay), in the same step.

Atomicity: every row writes a shadow of its tail; tails change only when the whole packed
forward succeeded, so a failed step can be re-run row by row (the scheduler does) and a
bad row fails alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentctx.serving.model_runner import ExtendStep, ModelRunner, PackedStep
from agentctx.serving.paged_kv import DocKV, QueryTail

__all__ = ["Row", "run_rows", "LOGITS"]

# What a row wants back: the last token's logits, every new token's (option scoring), or none
# (a prompt chunk that is not the prompt's last).
LOGITS = ("last", "all", "none")


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
    out: list[torch.Tensor | None] = [None] * len(rows)
    static = runner.query_mode != "eager"
    eager = [i for i, r in enumerate(rows) if not static and r.tail.static is None]
    for i, r in enumerate(rows):
        if static or r.tail.static is not None:
            out[i] = _static_row(runner, r)
    if eager:
        for i, res in zip(eager, _packed(runner, [rows[i] for i in eager])):
            out[i] = res
    return out


def _static_row(runner: ModelRunner, r: Row) -> torch.Tensor | None:
    logits = runner.extend(r.doc, r.tail, r.token_ids, r.pages, all_logits=r.want == "all",
                           logit_ids=r.logit_ids)
    return None if r.want == "none" else logits


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
    hidden = runner._hidden_rows(packed_ids, torch.cat(positions).view(1, -1), PackedStep(steps, spans))[0]
    for r, st in zip(rows, steps):
        r.tail.k, r.tail.v = st.tail.k, st.tail.v
        r.tail.length += len(r.token_ids)
    out: list[torch.Tensor | None] = [None] * len(rows)
    # One output-head product for every row that wants its last token's full logits.
    full = [i for i, r in enumerate(rows) if r.want == "last" and r.logit_ids is None]
    if full:
        last = torch.tensor([spans[i][1] - 1 for i in full], device=hidden.device)
        for i, logits in zip(full, runner.logits_from_hidden(hidden.index_select(0, last))):
            out[i] = logits
    for i, r in enumerate(rows):
        s, e = spans[i]
        if r.want == "all":
            out[i] = runner.logits_from_hidden(hidden[s:e])
        elif r.logit_ids is not None:
            out[i] = runner.logits_for(hidden[e - 1], r.logit_ids)
    return out
