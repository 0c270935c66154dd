"""The replica's scheduler: one forward per step over the pending work of every request.

Each request (a generation, an option scoring) opens a :class:`Sequence` and hands it work
from its own thread: a prompt (any length) or one decode token, and blocks until that work
is done. One scheduler thread owns every forward of the engine. Each step it

1. runs one queued job, if any (a document prefill runs as one job per chunk, so a long
   prefill is interleaved with the steps too); while requests run, jobs and steps share the
   time: a job waits until the steps since the last one have had as long as it took;
2. waits briefly until every running request that is busy picking its next token has handed
   in its work, so that decode rows stay in step together: at most ``gather_s`` or a quarter
   of the last step's time, whichever is longer (on a loaded CPU a thread's wake-up can take
   longer than a fixed few ms, and a row that misses a step then runs alone in the next);
3. takes, from the running requests, every pending decode token (one row each) and prompt
   tokens, shortest remaining prompt first, within ``step_tokens`` per step: prompts that
   finish in this step whole, a chunk of a longer one with the rest. When the step carries
   anyone else's next token (decode rows, finishing prompts) that chunk is at most
   ``step_tokens_decoding``, and at most what keeps the step within ``1 + decode_slowdown``
   times a step of decode rows alone, by the costs the scheduler measures (a prompt token
   costs ~3 ms on a 2-core CPU against ~50 ms for a decode step; microseconds on a GPU). So a
   stream's next token never waits long behind a long prompt, nor a short question behind a
   long one, and the long prompt still advances (at least ``min_chunk`` tokens a step);
4. runs them as one packed forward (serving/batch_forward.py) and hands each request its
   result. If that forward fails, every row is re-run alone, so a bad request fails alone.

Per-request logic (sampling, stop strings, streaming, copy constraints) stays in the
request's thread (serving/decode.py ``TokenLoop``); only forwards happen here.

Admission: at most ``max_rows`` requests run at a time (each adds at most one row per step)
and their estimated KV reads per step stay under ``max_step_kv_bytes``; the others wait, in
arrival order, and are reported as ``waiting``. Cancellation: a request's ``cancel`` event drops its pending work with
:class:`GenerationCancelled`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from agentctx.serving.batch_forward import Row

__all__ = ["Scheduler", "Sequence", "SchedulerStats", "GenerationCancelled"]

log = logging.getLogger(__name__)

_IDLE_POLL_S = 0.05  # how often an idle loop looks at cancellation events
_MAX_GATHER_S = 0.1


class GenerationCancelled(RuntimeError):
    """The request was cancelled (its consumer went away) before its work was done."""


@dataclass
class SchedulerStats:
    """Counters a replica reports (``describe()["scheduler"]``)."""

    steps: int = 0  # packed forwards run
    rows: int = 0  # rows those forwards carried
    decode_rows: int = 0
    prompt_tokens: int = 0  # prompt tokens those forwards carried
    max_rows_seen: int = 0  # most rows in one step
    fallbacks: int = 0  # steps that failed and were re-run row by row
    failed_rows: int = 0
    jobs: int = 0  # exclusive jobs run (prefill chunks)
    admitted: int = 0
    cancelled: int = 0


@dataclass
class _Work:
    row: Row  # all of the request's tokens; the step takes a chunk of them
    done_tokens: int = 0
    result: object = None
    error: BaseException | None = None
    finished: bool = False

    @property
    def remaining(self) -> int:
        return len(self.row.token_ids) - self.done_tokens


_seq_ids = itertools.count(1)


@dataclass(eq=False)
class Sequence:
    """One request's handle. Use as a context manager; :meth:`run` blocks for each piece of work."""

    scheduler: Scheduler
    kv_bytes: int = 0  # estimated KV bytes one of its rows reads per step
    cancel: threading.Event | None = None
    id: int = field(default_factory=lambda: next(_seq_ids))
    admitted: bool = False
    closed: bool = False
    work: _Work | None = None
    arrival: float = field(default_factory=time.monotonic)

    def run(self, row: Row):
        """Append ``row``'s tokens (a prompt or one decode token); returns what the row wants."""
        return self.scheduler._submit(self, row)

    def close(self) -> None:
        self.scheduler._close(self)

    def __enter__(self) -> Sequence:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


class Scheduler:
    """run_rows(rows) -> results runs one forward (serving.batch_forward.run_rows bound to a
    runner); it must leave its rows' tails unchanged when it raises."""

    def __init__(self, run_rows: Callable[[list[Row]], list], *, max_rows: int = 16, step_tokens: int = 512,
                 step_tokens_decoding: int = 64, max_step_kv_bytes: int | None = None, gather_s: float = 0.003,
                 decode_slowdown: float | None = 0.5, min_chunk: int = 4, name: str = "agentctx-scheduler"):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if step_tokens < 1 or step_tokens_decoding < 1:
            raise ValueError("step_tokens and step_tokens_decoding must be >= 1")
        if gather_s < 0:
            raise ValueError(f"gather_s must be >= 0, got {gather_s}")
        if decode_slowdown is not None and decode_slowdown <= 0:
            raise ValueError(f"decode_slowdown must be > 0 or None, got {decode_slowdown}")
        if min_chunk < 1:
            raise ValueError(f"min_chunk must be >= 1, got {min_chunk}")
        if max_step_kv_bytes is not None and max_step_kv_bytes < 1:
            raise ValueError(f"max_step_kv_bytes must be >= 1 or None, got {max_step_kv_bytes}")
        self._run = run_rows
        self.max_rows, self.step_tokens, self.step_tokens_decoding = max_rows, step_tokens, step_tokens_decoding
        self.max_step_kv_bytes, self.gather_s, self.name = max_step_kv_bytes, gather_s, name
        self.decode_slowdown, self.min_chunk = decode_slowdown, min_chunk
        self._last_job_s = 0.0  # how long the last job took, and the steps' time since
        self._steps_since_job_s = 0.0
        # Measured costs (exponential averages): a step of decode rows alone, and one prompt token.
        self._decode_step_s: float | None = None
        self._prompt_token_s: float | None = None
        self._cv = threading.Condition()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._last_step_s = 0.0
        self.stats = SchedulerStats()
        # Optional: called with each step's rows before it runs (tests record the order of work).
        self.on_step: Callable[[list[tuple[int, int]]], None] | None = None

    # ------------------------------------------------------------------ requests' side
    def open(self, kv_bytes: int = 0, cancel: threading.Event | None = None) -> Sequence:
        """A new request; it waits (``waiting``) until admitted."""
        seq = Sequence(self, kv_bytes=kv_bytes, cancel=cancel)
        with self._cv:
            self._ensure_thread()
            self._waiting.append(seq)
            self._admit()
            self._cv.notify_all()
        return seq

    def call(self, fn: Callable[[], object]):
        """Run fn on the scheduler thread between two steps (a prefill chunk); returns its result."""
        job = _Job(fn)
        with self._cv:
            self._ensure_thread()
            self._jobs.append(job)
            self._cv.notify_all()
            while not job.finished:
                self._cv.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def counts(self) -> dict:
        with self._cv:
            return {"running": len(self._running), "waiting": len(self._waiting)}

    def describe(self) -> dict:
        s = self.stats
        return {"max_rows": self.max_rows, "step_tokens": self.step_tokens,
                "step_tokens_decoding": self.step_tokens_decoding, "decoding_chunk": self.decoding_tokens(),
                "decode_step_ms": None if self._decode_step_s is None else round(self._decode_step_s * 1000, 2),
                "prompt_token_ms": None if self._prompt_token_s is None else round(self._prompt_token_s * 1000, 3),
                "max_step_kv_bytes": self.max_step_kv_bytes,
                **self.counts(), **vars(s)}

    def shutdown(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def _submit(self, seq: Sequence, row: Row):
        with self._cv:
            if seq.closed:
                raise RuntimeError("this request's sequence is closed")
            if seq.work is not None:
                raise RuntimeError("a sequence runs one piece of work at a time")
            if seq.cancelled:
                raise GenerationCancelled("request cancelled")
            work = seq.work = _Work(row)
            self._cv.notify_all()
            while not work.finished:
                self._cv.wait()
            seq.work = None
        if work.error is not None:
            raise work.error
        return work.result

    def _close(self, seq: Sequence) -> None:
        with self._cv:
            if seq.closed:
                return
            seq.closed = True
            if seq in self._running:
                self._running.remove(seq)
            elif seq in self._waiting:
                self._waiting.remove(seq)
            self._admit()
            self._cv.notify_all()

    # ------------------------------------------------------------------ admission
    def _can_admit(self, seq: Sequence) -> bool:
        if len(self._running) >= self.max_rows:
            return False
        if self.max_step_kv_bytes is not None and self._running:
            return sum(r.kv_bytes for r in self._running) + seq.kv_bytes <= self.max_step_kv_bytes
        return True  # a request over the bound on its own still runs, alone

    def _admit(self) -> None:
        """Admit waiting requests in arrival order (a later one never passes an earlier one)."""
        while self._waiting and self._can_admit(self._waiting[0]):
            seq = self._waiting.popleft()
            seq.admitted = True
            self._running.append(seq)
            self.stats.admitted += 1

    # ------------------------------------------------------------------ the loop
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopped = False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and not self._jobs and not self._ready():
                    self._cv.wait(_IDLE_POLL_S)
                    self._drop_cancelled()
                if self._stopped:
                    return
                # Jobs and steps share the replica's time: while requests run, a job waits until
                # the steps since the last job have had as long as that job took.
                owed = self._running and self._steps_since_job_s < self._last_job_s
                job = self._jobs.popleft() if self._jobs and not owed else None
            if job is not None:
                self._run_job(job)
                continue
            with self._cv:
                deadline = time.monotonic() + max(self.gather_s, min(_MAX_GATHER_S, self._last_step_s / 4))
                while (left := deadline - time.monotonic()) > 0 and any(self._busy(s) for s in self._running):
                    self._cv.wait(left)
                self._drop_cancelled()
                plan = self._compose()
                if not plan and self._jobs:  # nothing to step after all: the job goes now
                    self._steps_since_job_s = self._last_job_s
            if plan:
                self._step(plan)
                self._steps_since_job_s += self._last_step_s

    @staticmethod
    def _busy(seq: Sequence) -> bool:
        """Running, but its thread is picking its next token (or has not handed in work yet)."""
        return seq.work is None or seq.work.finished

    def _ready(self) -> bool:
        return any(s.work is not None and not s.work.finished for s in self._running)

    def _drop_cancelled(self) -> None:
        for s in [*self._running, *self._waiting]:
            if s.cancelled and s.work is not None and not s.work.finished:
                s.work.error, s.work.finished = GenerationCancelled("request cancelled"), True
                self.stats.cancelled += 1
                self._cv.notify_all()

    def decoding_tokens(self) -> int:
        """Prompt tokens a step may carry beside running generations' next tokens."""
        n = self.step_tokens_decoding
        if self.decode_slowdown is not None and self._decode_step_s and self._prompt_token_s:
            fit = int(self.decode_slowdown * self._decode_step_s / self._prompt_token_s)
            n = min(n, max(self.min_chunk, fit))
        return n

    def _compose(self) -> list[tuple[Sequence, _Work, int]]:
        """This step's rows: (sequence, work, tokens to take)."""
        pending = [s for s in self._running if s.work is not None and not s.work.finished]
        decode = [(s, s.work, 1) for s in pending if len(s.work.row.token_ids) == 1]
        prompts = sorted((s for s in pending if len(s.work.row.token_ids) > 1),
                         key=lambda s: (s.work.remaining, s.arrival))
        # Prompts that finish in this step go whole (shortest first) within step_tokens; a chunk
        # of a longer one takes the rest, but at most decoding_tokens() when the step carries
        # anyone else's next token (decode rows, finishing prompts): a long prompt then slows
        # their step by a bounded amount, while short new prompts still start at once.
        budget = self.step_tokens
        plan = list(decode)
        for s in prompts:
            if budget <= 0:
                break
            rem = s.work.remaining
            # Option scoring wants every token's logits: such a row (short) runs whole.
            if rem <= budget or s.work.row.want == "all":
                plan.append((s, s.work, rem))
                budget -= rem
                continue
            n = min(budget, self.decoding_tokens() if plan else budget)
            plan.append((s, s.work, n))
            budget -= n
        return plan

    def _measure(self, n_decode: int, n_prompt: int, seconds: float) -> None:
        """Update the cost averages from a step that succeeded."""
        def avg(old: float | None, new: float) -> float:
            return new if old is None else 0.7 * old + 0.3 * new

        if n_prompt == 0:
            if n_decode:
                self._decode_step_s = avg(self._decode_step_s, seconds)
        elif n_decode and self._decode_step_s is not None:
            self._prompt_token_s = avg(self._prompt_token_s, max(seconds - self._decode_step_s, 0.0) / n_prompt)
        elif not n_decode and n_prompt >= 16:  # a prompt step alone: an upper estimate (it includes the weights' read)
            self._prompt_token_s = avg(self._prompt_token_s, seconds / n_prompt)

    def _step(self, plan: list[tuple[Sequence, _Work, int]]) -> None:
        rows = [_chunk(w, n) for _, w, n in plan]
        if self.on_step is not None:
            self.on_step([(s.id, n) for s, _, n in plan])
        t0 = time.perf_counter()
        try:
            results = self._run(rows)
            if len(results) != len(rows):
                raise RuntimeError(f"run_rows returned {len(results)} results for {len(rows)} rows")
            outcomes = [(r, None) for r in results]
        except Exception as exc:  # noqa: BLE001 - re-run one by one below
            if len(rows) == 1:
                outcomes = [(None, exc)]
            else:
                log.warning("a step of %d rows failed (%s: %s); re-running each alone",
                            len(rows), type(exc).__name__, exc)
                self.stats.fallbacks += 1
                outcomes = []
                for row in rows:
                    try:
                        outcomes.append((self._run([row])[0], None))
                    except Exception as one:  # noqa: BLE001 - goes to that row's request
                        outcomes.append((None, one))
        self._last_step_s = time.perf_counter() - t0
        if all(e is None for _, e in outcomes):
            n_decode = sum(1 for _, w, _ in plan if len(w.row.token_ids) == 1)
            self._measure(n_decode, sum(n for _, w, n in plan if len(w.row.token_ids) > 1), self._last_step_s)
        with self._cv:
            st = self.stats
            st.steps += 1
            st.rows += len(rows)
            st.max_rows_seen = max(st.max_rows_seen, len(rows))
            for (_, work, n), (result, error) in zip(plan, outcomes):
                if len(work.row.token_ids) == 1:
                    st.decode_rows += 1
                else:
                    st.prompt_tokens += n
                if work.finished:  # cancelled meanwhile: its result is dropped
                    continue
                if error is not None:
                    st.failed_rows += 1
                    work.error, work.finished = error, True
                    continue
                work.done_tokens += n
                if work.remaining == 0:
                    work.result, work.finished = result, True
            self._cv.notify_all()

    def _run_job(self, job: _Job) -> None:
        t0 = time.perf_counter()
        try:
            job.result = job.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            job.error = exc
        self._last_job_s, self._steps_since_job_s = time.perf_counter() - t0, 0.0
        with self._cv:
            self.stats.jobs += 1
            job.finished = True
            self._cv.notify_all()


@dataclass(eq=False)
class _Job:
    fn: Callable[[], object]
    result: object = None
    error: BaseException | None = None
    finished: bool = False


def _chunk(work: _Work, n: int) -> Row:
    """The next n tokens of a piece of work as a row; logits only with its last chunk."""
    row = work.row
    last = work.done_tokens + n == len(row.token_ids)
    if work.done_tokens == 0 and last:
        return row
    ids = row.token_ids[work.done_tokens : work.done_tokens + n]
    if not last:
        return Row(row.doc, row.tail, ids, row.pages, "none")
    if row.want == "all":
        raise ValueError("a row wanting every token's logits must run in one chunk")
    return Row(row.doc, row.tail, ids, row.pages, row.want, row.logit_ids)
