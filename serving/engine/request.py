"""A request is state: what the engine loop knows of one generation or option scoring.

The loop (serving/engine/loop.py) owns every :class:`Request` it runs: its prompt, how much of it
is computed, the tokens sampled so far, its sampling parameters, stop and constraint state, its
plan (the pages it reads) and its KV tail. Callers never touch that state; they read what the
loop sends them through the request's :class:`TokenStream` (token ids as they are sampled, then
the end), from a thread (iterate) or from an event loop (``async for``).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum

import torch

from agentctx.serving.engine.sampler import RowSampling
from agentctx.serving.runner.paged_kv import DocKV, QueryTail
from agentctx.serving.types import SamplingParams

__all__ = ["Request", "RequestStatus", "TokenStream", "StreamEvent", "GenerationCancelled", "RequestKind"]

_ids = itertools.count(1)


class GenerationCancelled(RuntimeError):
    """The request was cancelled (its consumer went away) before it finished."""


class RequestStatus(Enum):
    WAITING = "waiting"  # not admitted yet
    RUNNING = "running"  # admitted: its rows go into steps
    FINISHED = "finished"


class RequestKind(Enum):
    GENERATE = "generate"
    SCORE = "score"  # log-probability of each option after the prompt


@dataclass(frozen=True)
class StreamEvent:
    """What the loop sends a caller: new token ids, or the end (``finish_reason`` / ``error``)."""

    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" when finished
    error: BaseException | None = None
    scores: tuple[float, ...] | None = None  # a score request's result


class TokenStream:
    """The caller's side of a request: events from the loop thread, read from a thread or an event loop.

    ``bind(loop)`` before the first event to read with ``async for`` (the loop thread then hands
    events over with ``call_soon_threadsafe``); otherwise iterate from a thread."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._aq: asyncio.Queue | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._aloop, self._aq = loop, asyncio.Queue()

    def put(self, event: StreamEvent) -> None:
        """Called by the engine loop (never blocks)."""
        if self._aloop is not None:
            try:
                self._aloop.call_soon_threadsafe(self._aq.put_nowait, event)
            except RuntimeError:  # the caller's event loop is closed: nobody reads any more
                pass
        else:
            self._q.put(event)

    def __iter__(self) -> Iterator[StreamEvent]:
        while True:
            ev = self._q.get()
            yield ev
            if ev.finish_reason is not None or ev.error is not None:
                return

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._aq is None:
            raise RuntimeError("bind(loop) the stream before reading it asynchronously")
        while True:
            ev = await self._aq.get()
            yield ev
            if ev.finish_reason is not None or ev.error is not None:
                return


@dataclass(eq=False)
class Request:
    """One request's state. Built by the engine API (serving/engine/local.py), run by the loop.

    ``pages``: sorted distinct page indices the global layers read (None: every page).
    ``options``: for a score request, each option's token ids (each runs on a fork of the tail).
    ``constraint``: an object with ``allowed_ids()`` and ``advance(token) -> bool`` (a verbatim
    quote, serving/copy_constraint.py). ``on_finish`` runs on the loop thread when it ends
    (the engine unpins the context there)."""

    doc: DocKV
    tail: QueryTail
    prompt_ids: list[int]
    pages: tuple[int, ...] | None = None
    kind: RequestKind = RequestKind.GENERATE
    max_new_tokens: int = 64
    temperature: float = 0.0
    sampling: SamplingParams | None = None
    stop_ids: frozenset[int] = frozenset()
    min_tokens: int = 0  # stop tokens are not sampled before this many tokens
    ignore_eos: bool = False
    constraint: object | None = None
    generator: torch.Generator | None = None  # a seeded request's own noise
    options: list[list[int]] | None = None
    per_token: bool = False  # score: mean log-prob per option token instead of the sum
    kv_bytes: int = 0  # estimated KV bytes one of its rows reads per step (admission)
    attended_tokens: int = 0  # document tokens its global layers read
    stream: TokenStream = field(default_factory=TokenStream)
    on_finish: Callable[[Request], None] | None = None
    id: int = field(default_factory=lambda: next(_ids))
    arrival: float = field(default_factory=time.monotonic)
    # ---- state the loop advances
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0  # prompt tokens whose KV is in the tail
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: BaseException | None = None
    first_token_at: float | None = None  # perf_counter when its first token was sampled
    steps: int = 0  # forwards that carried one of its rows
    first_logprobs: torch.Tensor | None = None  # score: log-softmax after the prompt (vocab,)
    option_logprobs: dict = field(default_factory=dict)  # score: option -> its later tokens' log-probs
    scores: list[float] | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("a request needs at least one prompt token")
        if self.kind is RequestKind.SCORE and not self.options:
            raise ValueError("a score request needs at least one option")

    # ---- what the scheduler reads
    @property
    def prompt_remaining(self) -> int:
        return len(self.prompt_ids) - self.num_computed

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def plain_greedy(self) -> bool:
        """Takes only the argmax of unmodified logits (may skip the full output head on CPU)."""
        return (self.temperature <= 0 and self.constraint is None and self.min_tokens == 0
                and (self.sampling is None or self.sampling.is_default))

    def sampling_row(self, allowed: list[int] | None) -> RowSampling:
        """How the sampler picks its next token (stop ids banned while under ``min_tokens``)."""
        banned = sorted(self.stop_ids) if self.min_tokens and len(self.output_ids) < self.min_tokens else None
        return RowSampling(self.temperature, self.sampling, self.output_ids, self.prompt_ids, allowed, banned,
                           self.generator)

    def allowed_ids(self) -> list[int] | None:
        """Token ids its next pick may take (a constraint), or None for any."""
        return None if self.constraint is None else self.constraint.allowed_ids()

    # ---- a score request's results, as its rows come back (called by the loop)
    def take_prompt_logits(self, logits: torch.Tensor) -> None:
        """The prompt's last logits (vocab,): they score each option's first token."""
        self.first_logprobs = torch.log_softmax(logits.float(), -1)
        self.option_logprobs = {}

    def take_option_logits(self, option: int, logits: torch.Tensor) -> None:
        """Every token's logits (T, vocab) of an option's row (its tokens but the last)."""
        ids = self.options[option]
        logp = torch.log_softmax(logits.float(), -1)
        tgt = torch.tensor(ids[1:], device=logp.device)
        self.option_logprobs[option] = logp[torch.arange(len(ids) - 1, device=logp.device), tgt].sum()

    def scores_ready(self) -> bool:
        longer = sum(1 for ids in self.options if len(ids) > 1)
        return self.first_logprobs is not None and len(self.option_logprobs) == longer

    def finish_scores(self) -> None:
        """Each option's log-probability: a sum over its tokens, or their mean with ``per_token``."""
        totals = [self.first_logprobs[ids[0]] + self.option_logprobs[k] if len(ids) > 1
                  else self.first_logprobs[ids[0]] for k, ids in enumerate(self.options)]
        vals = torch.stack(totals).tolist()
        self.scores = [v / len(ids) if self.per_token else v for v, ids in zip(vals, self.options)]
