"""The token loop after a prompt: pick a token, stop or go on, run the next forward.

The one decode loop of the project: the engine's generations (with text, stop strings and
streaming on top), the benchmark peers and the tests iterate over a ``TokenLoop``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from agentctx.serving.sampling import pick_token
from agentctx.serving.types import SamplingParams

__all__ = ["TokenLoop", "Constraint"]


class Constraint(Protocol):
    """Which tokens may come next (e.g. ``CopyConstraint``: a verbatim quote of the source)."""

    def allowed_ids(self) -> list[int]: ...
    def advance(self, token: int) -> bool: ...


class TokenLoop:
    """Iterate over the generated token ids, greedy (temperature 0) or sampled.

    ``logits``: the prompt's last logits, over the vocabulary, or over ``allowed`` ids when given
    (a constrained step computes only those). ``step(token, allowed)`` runs one forward with
    ``token`` and returns the next logits (over ``allowed`` when not None). The loop ends at a stop
    token, when the constraint refuses or allows nothing, or after ``max_new_tokens``; the last
    token's forward is never run. A consumer may stop iterating early (a stop string).

    After the loop: ``finish`` ("stop" | "length"), ``first_pick_at`` (``perf_counter`` when the
    first token was picked, None if none was) and ``steps`` (forwards run after the prompt's).
    """

    def __init__(self, logits: torch.Tensor, step: Callable[[int, list[int] | None], torch.Tensor], *,
                 max_new_tokens: int, stop_ids: set[int], temperature: float = 0.0,
                 generator: torch.Generator | None = None, constraint: Constraint | None = None,
                 allowed: list[int] | None = None, on_first: Callable[[], None] | None = None,
                 sampling: SamplingParams | None = None):
        self._logits, self._step = logits, step
        self.max_new_tokens, self.stop_ids = max_new_tokens, stop_ids
        self.temperature, self.generator = temperature, generator
        self.constraint, self._allowed, self._on_first = constraint, allowed, on_first
        self.sampling = sampling
        self._history: list[int] = []  # tokens picked so far (penalties count them)
        self.finish = "length"
        self.first_pick_at: float | None = None
        self.steps = 0

    def _pick(self, logits: torch.Tensor, allowed: list[int] | None = None) -> int:
        return pick_token(logits, self.temperature, self.sampling, self._history, self.generator, allowed)

    def __iter__(self) -> Iterator[int]:
        logits, allowed, constraint = self._logits, self._allowed, self.constraint
        for i in range(self.max_new_tokens):
            if allowed is not None and not allowed:
                self.finish = "stop"  # nothing may follow: the quote cannot start or continue
                return
            pick = self._pick(logits, allowed)
            token = allowed[pick] if allowed is not None else pick
            self._history.append(token)
            if self.first_pick_at is None:
                self.first_pick_at = time.perf_counter()
                if self._on_first is not None:
                    self._on_first()
            if token in self.stop_ids or (constraint is not None and not constraint.advance(token)):
                self.finish = "stop"
                return
            yield token
            if i == self.max_new_tokens - 1:
                return  # the last token's logits would never be read
            allowed = constraint.allowed_ids() if constraint is not None else None
            logits = self._step(token, allowed)
            self.steps += 1
