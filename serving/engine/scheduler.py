"""The planner of the engine loop: which rows the next forward carries. No threads, no forwards.

``schedule()`` returns one :class:`StepPlan`: a decode row (the last sampled token) of every
running generation, then prompt tokens of running requests, shortest remaining prompt first,
within ``step_tokens``: prompts that finish in this step go whole, and a chunk of a longer one
takes the rest, but only in a step where no prompt finishes (a first token waited for does not
wait for a long prompt's chunk too; the chunk runs the next step). When the step carries decode
rows a chunk is at most ``decoding_tokens()``: ``step_tokens_decoding``, and at most what keeps the step
within ``1 + decode_slowdown`` times a step of decode rows alone, by the costs :meth:`observe`
measures (a prompt token costs ~3 ms on a 2-core CPU against ~50 ms for a decode step). So a
stream's next token never waits long behind a long prompt, nor a short question behind a long
one, and the long prompt still advances (at least ``min_chunk`` tokens a step).

A score request runs its prompt like a generation, then all its options in one step: one row
per option, each on its own fork of the prompt's tail (the option's tokens but the last).

Admission: at most ``max_rows`` requests run at a time (each adds at most one row per step, or
one per option) and their estimated KV reads per step stay under ``max_step_kv_bytes``; the
others wait in arrival order (a later one never passes an earlier one).

The loop (serving/engine/loop.py) runs the plan's forward, samples, then tells each request
what happened through its own methods; the scheduler only hears :meth:`finish`. Tests drive it
with plain lists of tokens (tests/serving/test_engine_scheduler.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from agentctx.serving.engine.request import Request, RequestKind, RequestStatus
from agentctx.serving.runner.batch_forward import Row

__all__ = ["Scheduler", "StepPlan", "ScheduledRow", "SchedulerStats", "RowKind"]


class RowKind:
    PROMPT = "prompt"  # a chunk of a prompt; ``samples`` when it is the prompt's last
    DECODE = "decode"  # the request's last sampled token
    OPTION = "option"  # a score request's option on a fork of its tail (every token's logits)


@dataclass
class ScheduledRow:
    """One row of a step: a request's tokens to append, and what it wants back (fixed when planned)."""

    request: Request
    kind: str
    token_ids: list[int]
    option: int = -1  # which option (OPTION rows)
    last_chunk: bool = field(init=False)  # a prompt chunk that ends the prompt: its last logits are read
    samples: bool = field(init=False)  # a token is picked from this row's last logits

    def row(self) -> Row:
        """The forward's row: its tail (a fork for an option), plan and what it wants back."""
        req = self.request
        if self.kind == RowKind.OPTION:
            return Row(req.doc, req.tail.fork(), self.token_ids, req.pages, "all", checked=True)
        if req.kind is RequestKind.SCORE:  # the prompt's last logits score the options' first tokens
            return Row(req.doc, req.tail, self.token_ids, req.pages, "last" if self.last_chunk else "none",
                       checked=True)
        reserve = len(req.prompt_ids) + req.max_new_tokens
        if not self.samples:
            return Row(req.doc, req.tail, self.token_ids, req.pages, "none", checked=True, reserve=reserve)
        allowed = req.allowed_ids()
        if allowed:  # only these tokens' logits are computed (a verbatim quote)
            return Row(req.doc, req.tail, self.token_ids, req.pages, "last", logit_ids=allowed, checked=True,
                       reserve=reserve)
        want = "greedy" if req.plain_greedy else "last"
        return Row(req.doc, req.tail, self.token_ids, req.pages, want, checked=True, reserve=reserve)

    def __post_init__(self) -> None:
        r = self.request
        self.last_chunk = self.kind == RowKind.PROMPT and r.num_computed + len(self.token_ids) == len(r.prompt_ids)
        self.samples = r.kind is not RequestKind.SCORE and (
            self.kind == RowKind.DECODE or (self.last_chunk and r.max_new_tokens > 0))


@dataclass
class StepPlan:
    rows: list[ScheduledRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows)

    @property
    def num_decode(self) -> int:
        return sum(1 for r in self.rows if r.kind == RowKind.DECODE)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(r.token_ids) for r in self.rows if r.kind != RowKind.DECODE)


@dataclass
class SchedulerStats:
    """Counters a replica reports (``describe()["scheduler"]``)."""

    steps: int = 0  # forwards planned
    rows: int = 0  # rows those forwards carried
    decode_rows: int = 0
    prompt_tokens: int = 0
    max_rows_seen: int = 0  # most rows in one step
    admitted: int = 0
    finished: int = 0
    cancelled: int = 0


class Scheduler:
    def __init__(self, *, max_rows: int = 16, step_tokens: int = 512, step_tokens_decoding: int = 64,
                 max_step_kv_bytes: int | None = None, decode_slowdown: float | None = 0.5, min_chunk: int = 4):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if step_tokens < 1 or step_tokens_decoding < 1:
            raise ValueError("step_tokens and step_tokens_decoding must be >= 1")
        if decode_slowdown is not None and decode_slowdown <= 0:
            raise ValueError(f"decode_slowdown must be > 0 or None, got {decode_slowdown}")
        if min_chunk < 1:
            raise ValueError(f"min_chunk must be >= 1, got {min_chunk}")
        if max_step_kv_bytes is not None and max_step_kv_bytes < 1:
            raise ValueError(f"max_step_kv_bytes must be >= 1 or None, got {max_step_kv_bytes}")
        self.max_rows, self.step_tokens, self.step_tokens_decoding = max_rows, step_tokens, step_tokens_decoding
        self.max_step_kv_bytes, self.decode_slowdown, self.min_chunk = max_step_kv_bytes, decode_slowdown, min_chunk
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stats = SchedulerStats()
        # Measured costs (exponential averages): a step of decode rows alone, and one prompt token.
        self.decode_step_s: float | None = None
        self.prompt_token_s: float | None = None

    # ------------------------------------------------------------------ requests
    def add(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.append(req)

    def finish(self, req: Request) -> None:
        """Take a finished (or cancelled, or failed) request out of the queues."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.stats.finished += 1

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def counts(self) -> dict:
        return {"running": len(self.running), "waiting": len(self.waiting)}

    # ------------------------------------------------------------------ admission
    def can_admit(self, req: Request) -> bool:
        if len(self.running) >= self.max_rows:
            return False
        if self.max_step_kv_bytes is not None and self.running:
            return sum(r.kv_bytes for r in self.running) + req.kv_bytes <= self.max_step_kv_bytes
        return True  # a request over the bound on its own still runs, alone

    def admit(self) -> None:
        while self.waiting and self.can_admit(self.waiting[0]):
            req = self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            self.stats.admitted += 1

    # ------------------------------------------------------------------ planning
    def decoding_tokens(self) -> int:
        """Prompt tokens a step may carry beside other requests' next tokens."""
        n = self.step_tokens_decoding
        if self.decode_slowdown is not None and self.decode_step_s and self.prompt_token_s:
            fit = int(self.decode_slowdown * self.decode_step_s / self.prompt_token_s)
            n = min(n, max(self.min_chunk, fit))
        return n

    def schedule(self) -> StepPlan:
        self.admit()
        plan = StepPlan()
        prompts = []
        for req in self.running:
            if req.prompt_remaining == 0:
                if req.kind is RequestKind.SCORE:
                    plan.rows.extend(self._option_rows(req))
                else:
                    plan.rows.append(ScheduledRow(req, RowKind.DECODE, [req.output_ids[-1]]))
            else:
                prompts.append(req)
        prompts.sort(key=lambda r: (r.prompt_remaining, r.arrival))
        budget = self.step_tokens
        first_tokens = False  # a prompt finishes in this step: someone's first token is waited for
        for req in prompts:
            if budget <= 0:
                break
            rem = req.prompt_remaining
            if rem <= budget:
                n = rem
                first_tokens = True
            elif first_tokens:
                break  # no chunk of a longer prompt beside a first token: it goes next step
            else:
                n = min(budget, self.decoding_tokens() if plan.rows else budget)
            start = req.num_computed
            plan.rows.append(ScheduledRow(req, RowKind.PROMPT, req.prompt_ids[start : start + n]))
            budget -= n
        st = self.stats
        if plan.rows:
            st.steps += 1
            st.rows += len(plan.rows)
            st.decode_rows += plan.num_decode
            st.prompt_tokens += plan.num_prompt_tokens
            st.max_rows_seen = max(st.max_rows_seen, len(plan.rows))
        return plan

    @staticmethod
    def _option_rows(req: Request) -> list[ScheduledRow]:
        # An option of one token needs no forward: the prompt's last logits score it.
        return [ScheduledRow(req, RowKind.OPTION, ids[:-1], option=i) for i, ids in enumerate(req.options)
                if len(ids) > 1]

    # ------------------------------------------------------------------ costs
    def observe(self, plan: StepPlan, seconds: float) -> None:
        """Update the cost averages from a step that succeeded."""
        def avg(old: float | None, new: float) -> float:
            return new if old is None else 0.7 * old + 0.3 * new

        n_decode, n_prompt = plan.num_decode, plan.num_prompt_tokens
        if n_prompt == 0:
            if n_decode:
                self.decode_step_s = avg(self.decode_step_s, seconds)
        elif n_decode and self.decode_step_s is not None:
            self.prompt_token_s = avg(self.prompt_token_s, max(seconds - self.decode_step_s, 0.0) / n_prompt)
        elif not n_decode and n_prompt >= 16:  # a prompt step alone: an upper estimate (it includes the weights)
            self.prompt_token_s = avg(self.prompt_token_s, seconds / n_prompt)
