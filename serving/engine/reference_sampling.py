"""The plain reference of token picking and of a one-request decode loop.

``pick_token``: one row at a time, on the host, what the batched sampler
(serving/engine/sampler.py) computes for every row of a step at once: penalties on the raw
logits (presence/frequency over the generated tokens, vLLM's repetition penalty over prompt and
output), then temperature, then top-k, min-p and top-p filtering of the distribution, then a
draw (OpenAI's and vLLM's order). Greedy (temperature 0) is an argmax over the penalised logits.

``greedy_decode``: one request alone, one forward per token, the reference the engine loop's
batched tokens are held to (tests) and the benchmark peers' decode loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import torch

from agentctx.serving.types import SamplingParams

__all__ = ["pick_token", "apply_penalties", "filter_probs", "greedy_decode"]


def apply_penalties(logits: torch.Tensor, params: SamplingParams, history: Sequence[int],
                    ids: Sequence[int] | None = None, prompt: Sequence[int] = ()) -> torch.Tensor:
    """``logits[j] -= presence * [count_j > 0] + frequency * count_j`` over the generated tokens,
    then the repetition penalty over ``prompt`` and ``history`` (divide a positive logit by it,
    multiply a negative one).

    ``ids``: the vocabulary id of each logit when the logits cover a subset (a constrained step);
    None when they cover the whole vocabulary. Returns a new tensor (float32)."""
    out = logits.float().clone()
    where = None if ids is None else {t: i for i, t in enumerate(ids)}
    if params.repetition_penalty != 1.0:
        for token in {*history, *prompt}:
            i = token if where is None else where.get(token)
            if i is not None and 0 <= i < out.shape[-1]:
                v = out[i]
                out[i] = v / params.repetition_penalty if v > 0 else v * params.repetition_penalty
    if not history or (params.presence_penalty == 0 and params.frequency_penalty == 0):
        return out
    counts = Counter(history)
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
               ids: Sequence[int] | None = None, prompt: Sequence[int] = ()) -> int:
    """The index (into ``logits``) of the next token.

    ``logits``: (V,) or (1, V) for one row; ``history``: token ids this generation produced so far;
    ``ids``: vocabulary ids of the logits when they cover a subset (penalties need them).
    """
    if params is None or params.is_default:
        if temperature <= 0:
            return int(torch.argmax(logits))  # a host sync: the token is known on the host
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))
    x = apply_penalties(logits.reshape(-1), params, history, ids, prompt)
    if temperature <= 0:
        return int(torch.argmax(x))
    probs = filter_probs(torch.softmax(x.cpu() / temperature, dim=-1), params)
    return int(torch.multinomial(probs, 1, generator=generator))


def greedy_decode(logits: torch.Tensor, step: Callable[[int], torch.Tensor], max_new_tokens: int,
                  stop_ids: set[int], on_first: Callable[[], None] | None = None) -> list[int]:
    """Greedy tokens of one request alone: ``logits`` after its prompt, ``step(token)`` runs one
    forward and returns the next logits. Ends at a stop token (not returned) or after
    ``max_new_tokens``; the last token's forward is never run. ``on_first`` runs once the first
    token is picked (benchmark peers time their TTFT there)."""
    out: list[int] = []
    for i in range(max_new_tokens):
        token = int(torch.argmax(logits))
        if i == 0 and on_first is not None:
            on_first()
        if token in stop_ids:
            break
        out.append(token)
        if i < max_new_tokens - 1:
            logits = step(token)
    return out
