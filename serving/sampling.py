"""Picking the next token: penalties, temperature, top-k, min-p, top-p. One function, per row.

``pick_token`` is what the token loop calls after each forward, and what a batched scheduler
calls for each of its rows: it needs only that row's logits, its parameters and the tokens it
has generated so far. Greedy (temperature 0) is an argmax over the penalised logits, so with
default parameters it is exactly the argmax of the logits.

Order (OpenAI's and vLLM's): presence/frequency penalties on the raw logits, then temperature,
then top-k, min-p and top-p filtering of the distribution, then a draw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from agentctx.serving.types import SamplingParams

__all__ = ["pick_token", "apply_penalties", "filter_probs"]


def apply_penalties(logits: torch.Tensor, params: SamplingParams, history: Sequence[int],
                    ids: Sequence[int] | None = None) -> torch.Tensor:
    """``logits[j] -= presence * [count_j > 0] + frequency * count_j`` over the generated tokens.

    ``ids``: the vocabulary id of each logit when the logits cover a subset (a constrained step);
    None when they cover the whole vocabulary. Returns a new tensor (float32)."""
    out = logits.float().clone()
    if not history or (params.presence_penalty == 0 and params.frequency_penalty == 0):
        return out
    counts = Counter(history)
    where = None if ids is None else {t: i for i, t in enumerate(ids)}
    pos, cnt = [], []
    for token, n in counts.items():
        i = token if where is None else where.get(token)
        if i is not None and 0 <= i < out.shape[-1]:
            pos.append(i)
            cnt.append(n)
    if pos:
        idx = torch.tensor(pos, device=out.device)
        c = torch.tensor(cnt, dtype=out.dtype, device=out.device)
        out[idx] -= params.presence_penalty + params.frequency_penalty * c
    return out


def filter_probs(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Zero what top-k, min-p and top-p exclude (the most likely token always stays); not renormalised."""
    p = probs
    if params.top_k and 0 < params.top_k < p.shape[-1]:
        kth = torch.topk(p, params.top_k).values[-1]
        p = torch.where(p >= kth, p, torch.zeros_like(p))
    if params.min_p > 0:
        p = torch.where(p >= params.min_p * p.max(), p, torch.zeros_like(p))
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(p, descending=True)
        before = torch.cumsum(sorted_p, 0) - sorted_p  # mass of the strictly more likely tokens
        keep_sorted = before < params.top_p * sorted_p.sum()
        keep_sorted[0] = True
        keep = torch.zeros_like(keep_sorted)
        keep[order] = keep_sorted
        p = torch.where(keep, p, torch.zeros_like(p))
    return p


def pick_token(logits: torch.Tensor, temperature: float, params: SamplingParams | None = None,
               history: Sequence[int] = (), generator: torch.Generator | None = None,
               ids: Sequence[int] | None = None) -> int:
    """The index (into ``logits``) of the next token.

    ``logits``: (V,) or (1, V) for one row; ``history``: token ids this generation produced so far;
    ``ids``: vocabulary ids of the logits when they cover a subset (penalties need them).
    """
    if params is None or params.is_default:
        if temperature <= 0:
            return int(torch.argmax(logits))  # a host sync: the token is known on the host
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))
    x = apply_penalties(logits.reshape(-1), params, history, ids)
    if temperature <= 0:
        return int(torch.argmax(x))
    probs = filter_probs(torch.softmax(x.cpu() / temperature, dim=-1), params)
    return int(torch.multinomial(probs, 1, generator=generator))
