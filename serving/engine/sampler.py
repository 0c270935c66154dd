"""The next token of every row of a step, picked in one batched pass on the logits' device.

The engine loop hands the sampler one (n, V) logits matrix (a row per request that picks a token
this step) and each row's parameters; it returns the n token ids as a device tensor, so the only
host sync of a step is the loop reading them. Per row, in the order OpenAI and vLLM use:

1. masks: a constrained row (a verbatim quote) may take only its allowed ids; a row under
   ``min_tokens`` may not take a stop id yet;
2. penalties on the raw logits: presence / frequency over the tokens it generated
   (``logit -= presence * [count > 0] + frequency * count``) and vLLM's repetition penalty over
   prompt and output tokens (a positive logit divided by it, a negative one multiplied);
3. greedy rows (temperature 0): the argmax;
4. sampled rows: softmax at their temperature, then top-k, min-p and top-p filters (the most
   likely token always stays), then a draw by the exponential race: ``argmax(p / q)`` with
   ``q ~ Exp(1)`` picks token j with probability proportional to p_j. A seeded row draws its q
   from its own generator, so its tokens do not depend on what else shares its steps.

The plain-PyTorch reference is ``serving/engine/reference_sampling.py`` (one row at a time);
tests/serving/test_sampler.py holds this against it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentctx.serving.types import SamplingParams

__all__ = ["RowSampling", "sample", "filter_sorted_keep"]


@dataclass
class RowSampling:
    """How one row's token is picked. ``history``: tokens the request generated so far;
    ``prompt``: its prompt tokens (the repetition penalty counts them too)."""

    temperature: float = 0.0
    params: SamplingParams | None = None
    history: Sequence[int] = ()
    prompt: Sequence[int] = ()
    allowed: Sequence[int] | None = None  # the only ids it may take (a constraint)
    banned: Sequence[int] | None = None  # ids it may not take (stop ids under min_tokens)
    generator: torch.Generator | None = None

    @property
    def plain(self) -> bool:
        p = self.params
        return self.allowed is None and not self.banned and (p is None or p.is_default)


def sample(logits: torch.Tensor, rows: Sequence[RowSampling], generator: torch.Generator | None = None
           ) -> torch.Tensor:
    """Token ids (n,) int64 on ``logits.device`` for logits (n, V); ``generator``: the noise of
    unseeded sampled rows (None: torch's default for the device)."""
    n = logits.shape[0]
    if n != len(rows):
        raise ValueError(f"sample: {n} logits rows for {len(rows)} rows of parameters")
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=logits.device)
    if all(r.temperature <= 0 and r.plain for r in rows):
        return logits.argmax(-1)  # the common case: no copy, one kernel
    x = logits.float().clone()
    _masks(x, rows)
    _penalties(x, rows)
    out = x.argmax(-1)
    hot = [i for i, r in enumerate(rows) if r.temperature > 0]
    if hot:
        out[torch.tensor(hot, device=x.device)] = _draw(x, hot, rows, generator)
    return out


def _masks(x: torch.Tensor, rows: Sequence[RowSampling]) -> None:
    for i, r in enumerate(rows):
        if r.allowed is not None:
            keep = torch.zeros(x.shape[1], dtype=torch.bool, device=x.device)
            if len(r.allowed):
                keep[torch.as_tensor(list(r.allowed), device=x.device)] = True
            x[i].masked_fill_(~keep, float("-inf"))
        if r.banned:
            x[i, torch.as_tensor(list(r.banned), device=x.device)] = float("-inf")


def _penalties(x: torch.Tensor, rows: Sequence[RowSampling]) -> None:
    for i, r in enumerate(rows):
        p = r.params
        if p is None:
            continue
        if r.history and (p.presence_penalty or p.frequency_penalty):
            counts = Counter(r.history)
            ids = torch.tensor(list(counts), device=x.device)
            c = torch.tensor(list(counts.values()), dtype=x.dtype, device=x.device)
            x[i, ids] -= p.presence_penalty + p.frequency_penalty * c
        if p.repetition_penalty != 1.0 and (r.history or r.prompt):
            ids = torch.tensor(sorted({*r.history, *r.prompt}), device=x.device)
            v = x[i, ids]
            x[i, ids] = torch.where(v > 0, v / p.repetition_penalty, v * p.repetition_penalty)


def filter_sorted_keep(sorted_p: torch.Tensor, top_k: torch.Tensor, min_p: torch.Tensor, top_p: torch.Tensor
                       ) -> torch.Tensor:
    """Which entries of probabilities sorted in descending order (n, V) survive top-k (n,) int
    (0: all), min-p (n,) and top-p (n,): a bool (n, V) in the same sorted order.

    The same filters as the reference (``filter_probs``): top-k keeps what reaches the k-th
    probability (ties kept), min-p what reaches min_p x the largest, and top-p the smallest
    prefix of the survivors whose mass reaches top_p of theirs; the first always stays."""
    v = sorted_p.shape[1]
    k = torch.where(top_k > 0, top_k.clamp(max=v), torch.full_like(top_k, v))
    kth = sorted_p.gather(1, (k - 1).unsqueeze(1))  # (n, 1)
    keep = (sorted_p >= kth) & (sorted_p >= min_p.unsqueeze(1) * sorted_p[:, :1])
    kept = sorted_p * keep
    before = torch.cumsum(kept, 1) - kept  # mass of the strictly more likely survivors
    keep &= before < top_p.unsqueeze(1) * kept.sum(1, keepdim=True)
    keep[:, 0] = True
    return keep


def _draw(x: torch.Tensor, hot: list[int], rows: Sequence[RowSampling], generator) -> torch.Tensor:
    dev = x.device
    idx = torch.tensor(hot, device=dev)
    temps = torch.tensor([rows[i].temperature for i in hot], dtype=x.dtype, device=dev)
    probs = torch.softmax(x.index_select(0, idx) / temps.unsqueeze(1), dim=-1)
    params = [rows[i].params or _DEFAULT for i in hot]
    if any(p.top_k or p.top_p < 1.0 for p in params):
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = filter_sorted_keep(
            sorted_p,
            torch.tensor([p.top_k for p in params], device=dev),
            torch.tensor([p.min_p for p in params], dtype=x.dtype, device=dev),
            torch.tensor([p.top_p for p in params], dtype=x.dtype, device=dev))
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_p * keep)
    elif any(p.min_p > 0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], dtype=x.dtype, device=dev)
        probs = torch.where(probs >= min_p.unsqueeze(1) * probs.amax(1, keepdim=True), probs, 0.0)
    q = torch.empty_like(probs)
    seeded = [j for j, i in enumerate(hot) if rows[i].generator is not None]
    if len(seeded) < len(hot):
        q.exponential_(generator=generator)
    for j in seeded:
        q[j].exponential_(generator=rows[hot[j]].generator)
    # exponential_ may return 0: a zero-probability token must still lose (0 / tiny = 0, never NaN).
    return (probs / q.clamp_(min=torch.finfo(q.dtype).tiny)).argmax(-1)


_DEFAULT = SamplingParams()
