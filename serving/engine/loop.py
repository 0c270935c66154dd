"""The engine loop: one thread per replica owns every request and every forward.

Each iteration::

    plan = scheduler.schedule()           # which rows: decode tokens, prompt chunks, options
    out = run_step(runner, rows(plan))     # one packed forward (serving/runner/batch_forward.py)
    tokens = sample(out.last, params)      # every row's next token at once, on the device
    postprocess(plan, tokens.tolist())     # the step's one host sync; append, stop, finish

Callers never wait per token on this thread: :meth:`EngineLoop.submit` queues a request and
returns at once, and tokens reach the request's :class:`TokenStream` as they are sampled.
Detokenization and stop strings happen on the caller's side (serving/engine/local.py); a caller
that is done early calls :meth:`abort`.

Jobs (a document prefill chunk, run through :meth:`call`) go between steps; while requests run,
a job waits until the steps since the last job have had as long as that job took, so a long
prefill and running generations share the replica's time.

If a forward fails, each of its rows is run alone, so a bad request fails alone (its stream gets
the error) and the others go on. :meth:`step` is public: tests drive the loop without its thread.

Greedy decode windows (``decode_steps`` k > 1, the GPU default): when every row of a step is a
plain greedy decode row, the loop runs k forwards back to back with each argmax fed to the next
forward on the device (``run_greedy``, serving/runner/batch_forward.run_greedy_steps) and syncs
once for the k tokens (one event per request), so its own Python between forwards is paid once
per k. A request that stops inside the window (an end token, its length) drops the rest of it.
New requests wait at most one window (a few ms) to be scheduled. k = 1: a sync after every forward.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentctx.serving.engine.request import GenerationCancelled, Request, RequestKind, RequestStatus, StreamEvent
from agentctx.serving.engine.sampler import RowSampling, sample
from agentctx.serving.engine.scheduler import RowKind, ScheduledRow, Scheduler, StepPlan
from agentctx.serving.runner.batch_forward import Row, StepOutput, release

__all__ = ["EngineLoop", "LoopStats", "GRAPH_DECODE_STEPS"]

log = logging.getLogger(__name__)
GRAPH_DECODE_STEPS = 4  # forwards per greedy decode window on the CUDA-graph path (docstring above)


@dataclass
class LoopStats:
    steps: int = 0  # forwards run
    fallbacks: int = 0  # steps that failed and were re-run row by row
    failed_rows: int = 0
    jobs: int = 0  # jobs run (prefill chunks)
    host_syncs: int = 0  # reads of device results by the host (one per step that samples)
    tokens: int = 0  # tokens sampled
    windows: int = 0  # greedy decode windows run (each decode_steps forwards, one sync)
    step_s: float = 0.0  # time in steps (forward, sampling, postprocess)


@dataclass(eq=False)
class _Job:
    fn: Callable[[], object]
    result: object = None
    error: BaseException | None = None
    done: threading.Event = None

    def __post_init__(self) -> None:
        self.done = threading.Event()


class EngineLoop:
    """``run_step(rows) -> StepOutput`` runs one forward (serving/runner/batch_forward.run_step bound
    to a runner); it must leave its rows' tails unchanged when it raises."""

    def __init__(self, run_step: Callable[[list[Row]], StepOutput], scheduler: Scheduler, *,
                 device: torch.device | str = "cpu", name: str = "agentctx-engine", thread: bool = True,
                 run_greedy: Callable[[list[Row], int], torch.Tensor | None] | None = None, decode_steps: int = 1):
        """thread=False: no thread is started; the caller drives :meth:`step` (tests). ``run_greedy(rows,
        k)``: k greedy forwards fed on the device, tokens (n, k) or None (see the module docstring)."""
        if decode_steps < 1:
            raise ValueError(f"decode_steps must be >= 1, got {decode_steps}")
        self._run = run_step
        self._run_greedy = run_greedy
        self.decode_steps = decode_steps
        self._threaded = thread
        self.scheduler = scheduler
        self.name = name
        self.stats = LoopStats()
        self.device = torch.device(device)
        self._generator = torch.Generator(device=self.device)  # noise of unseeded sampled rows
        self._generator.seed()
        self._cv = threading.Condition()
        self._inbox: deque[Request] = deque()
        self._aborts: deque[tuple[Request, str]] = deque()
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._last_job_s = 0.0  # how long the last job took, and the steps' time since
        self._steps_since_job_s = 0.0
        # Optional: called with each step's plan before it runs (tests record the order of work).
        self.on_step: Callable[[StepPlan], None] | None = None

    # ------------------------------------------------------------------ callers' side (any thread)
    def submit(self, req: Request) -> Request:
        """Queue a request; its tokens arrive on ``req.stream``."""
        with self._cv:
            if self._stopped:
                raise RuntimeError("the engine loop is shut down")
            self._inbox.append(req)
            self._ensure_thread()
            self._cv.notify_all()
        return req

    def abort(self, req: Request, reason: str = "cancelled") -> None:
        """End a request early: "cancelled" (its stream gets GenerationCancelled) or "stop" (a
        stop string the caller found: finished normally)."""
        with self._cv:
            self._aborts.append((req, reason))
            self._cv.notify_all()

    def call(self, fn: Callable[[], object]):
        """Run fn on the loop thread between two steps (a prefill chunk); returns its result."""
        if not self._threaded:
            return fn()
        job = _Job(fn)
        with self._cv:
            if self._stopped:
                raise RuntimeError("the engine loop is shut down")
            self._jobs.append(job)
            self._ensure_thread()
            self._cv.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def counts(self) -> dict:
        with self._cv:
            c = self.scheduler.counts()
            c["waiting"] += len(self._inbox)
            return c

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop the thread after its current step; requests still queued end with an error."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._drain()
        gone = RuntimeError("the engine loop shut down")
        for req in [*self.scheduler.running, *self.scheduler.waiting]:
            self._end(req, error=gone)
        for job in self._jobs:
            job.error = gone
            job.done.set()
        self._jobs.clear()

    # ------------------------------------------------------------------ the thread
    def _ensure_thread(self) -> None:
        if self._threaded and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()

    def _main(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and not self._jobs and not self._inbox and not self._aborts \
                        and not self.scheduler.has_work():
                    self._cv.wait()
                if self._stopped:
                    return
                # Jobs and steps share the time: while requests run, a job waits until the
                # steps since the last job have had as long as that job took.
                busy = self.scheduler.has_work() or bool(self._inbox)
                owed = busy and self._steps_since_job_s < self._last_job_s
                job = self._jobs.popleft() if self._jobs and not owed else None
            if job is not None:
                self._run_job(job)
                continue
            t0 = time.perf_counter()
            try:
                stepped = self.step()
            except Exception as exc:  # noqa: BLE001 - a bug outside the forward: fail what is running, go on
                log.exception("the engine loop's step failed; failing the running requests")
                for req in list(self.scheduler.running):
                    self._end(req, error=exc)
                stepped = True
            if not stepped and self._jobs:
                self._steps_since_job_s = self._last_job_s  # nothing to step after all: the job goes now
            self._steps_since_job_s += time.perf_counter() - t0

    def _run_job(self, job: _Job) -> None:
        t0 = time.perf_counter()
        try:
            job.result = job.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            job.error = exc
        self._last_job_s, self._steps_since_job_s = time.perf_counter() - t0, 0.0
        self.stats.jobs += 1
        job.done.set()

    def _drain(self) -> None:
        """Move new requests and aborts from the callers' queues into the scheduler."""
        with self._cv:
            new, self._inbox = list(self._inbox), deque()
            aborts, self._aborts = list(self._aborts), deque()
        for req in new:
            self.scheduler.add(req)
        for req, reason in aborts:
            if req.finished:
                continue
            if reason == "stop":
                self._end(req, reason="stop")
            else:
                self.scheduler.stats.cancelled += 1
                self._end(req, error=GenerationCancelled("request cancelled"))

    # ------------------------------------------------------------------ one step
    def step(self) -> bool:
        """Schedule, run one forward, sample, postprocess. False when there was nothing to run."""
        self._drain()
        plan = self.scheduler.schedule()
        if not plan:
            return False
        if self.on_step is not None:
            self.on_step(plan)
        t0 = time.perf_counter()
        rows = [sr.row() for sr in plan.rows]
        if self._greedy_window(plan, rows):
            self.scheduler.observe(plan, (time.perf_counter() - t0) / self.decode_steps)
            self.stats.steps += self.decode_steps
            self.stats.step_s += time.perf_counter() - t0
            return True
        try:
            out = self._run(rows)
        except Exception as exc:  # noqa: BLE001 - re-run one by one below
            if len(rows) == 1:
                self._fail(plan.rows[0], exc)
            else:
                log.warning("a step of %d rows failed (%s: %s); re-running each alone", len(rows),
                            type(exc).__name__, exc)
                self.stats.fallbacks += 1
                for sr, row in zip(plan.rows, rows):
                    if sr.request.finished:
                        continue
                    try:
                        one = self._run([row])
                    except Exception as err:  # noqa: BLE001 - goes to that row's request
                        self._fail(sr, err)
                    else:
                        self._postprocess(StepPlan([sr]), one)
        else:
            synced = self._postprocess(plan, out)
            if not synced and self.device.type == "cuda":
                # A step that sampled nothing (prompt chunks only) has not waited for its GPU work.
                # Wait now: else the loop queues a long prompt's every chunk at once, and a short
                # question that arrives meanwhile waits behind all of them (186x its idle TTFT).
                torch.cuda.current_stream(self.device).synchronize()
                self.stats.host_syncs += 1
            self.scheduler.observe(plan, time.perf_counter() - t0)
        self.stats.steps += 1
        self.stats.step_s += time.perf_counter() - t0
        return True

    def _greedy_window(self, plan: StepPlan, rows: list[Row]) -> bool:
        """Run a greedy decode window for this plan if it applies; True when it ran."""
        k = self.decode_steps
        if k < 2 or self._run_greedy is None:
            return False
        if not all(sr.kind == RowKind.DECODE and sr.request.kind is RequestKind.GENERATE
                   and sr.request.plain_greedy for sr in plan.rows):
            return False
        try:
            tokens = self._run_greedy(rows, k)
        except Exception as exc:  # noqa: BLE001 - the ordinary step below runs these rows again
            log.warning("a greedy decode window failed (%s: %s); running single steps", type(exc).__name__, exc)
            return False
        if tokens is None:
            return False
        picked = tokens.tolist()  # the window's one host sync
        self.stats.host_syncs += 1
        self.stats.windows += 1
        for sr, toks in zip(plan.rows, picked):
            req = sr.request
            req.steps += k
            burst: list[int] = []  # the window's tokens reach the caller as one event
            for tok in toks:
                if req.finished:
                    break  # stopped inside the window: the rest is dropped
                self.stats.tokens += 1
                self._append(req, tok, burst)
            self._flush(req, burst)
        return True

    def _postprocess(self, plan: StepPlan, out: StepOutput) -> bool:
        """Sample, append, finish; True when the host waited for the device (read sampled tokens)."""
        picks: list[tuple[ScheduledRow, int]] = []  # rows that sample, and their row of out.last
        params: list[RowSampling] = []
        for i, sr in enumerate(plan.rows):
            req = sr.request
            req.steps += 1
            if sr.kind == RowKind.PROMPT:
                req.num_computed += len(sr.token_ids)
            if sr.samples:
                allowed = req.allowed_ids()
                if allowed is not None and not allowed:
                    self._end(req, reason="stop")  # nothing may follow: the quote cannot start or go on
                    continue
                picks.append((sr, out.index[i]))
                params.append(req.sampling_row(allowed))
        scored = self._scores(plan, out)
        if picks:
            which = [j for _, j in picks]
            if which == list(range(out.last.shape[0])):
                logits = out.last
            else:
                logits = out.last.index_select(0, torch.tensor(which).to(out.last.device, non_blocking=True))
            tokens = sample(logits, params, self._generator).tolist()  # the step's host sync
            self.stats.host_syncs += 1
            self.stats.tokens += len(tokens)
            for (sr, _), tok in zip(picks, tokens):
                self._append(sr.request, tok)
        for req in scored:
            self._end(req, reason="stop")
        for sr in plan.rows:  # a generation asked for no token at all
            req = sr.request
            if sr.last_chunk and req.kind is RequestKind.GENERATE and req.max_new_tokens == 0 and not req.finished:
                self._end(req, reason="length")
        return bool(picks or scored)

    @staticmethod
    def _scores(plan: StepPlan, out: StepOutput) -> list[Request]:
        """Score requests' rows into their state; the requests whose every option is scored."""
        done = []
        for i, sr in enumerate(plan.rows):
            req = sr.request
            if req.kind is not RequestKind.SCORE:
                continue
            if sr.last_chunk:
                req.take_prompt_logits(out.last[out.index[i]])
            elif sr.kind == RowKind.OPTION:
                req.take_option_logits(sr.option, out.all[i])
            else:
                continue
            if req.scores_ready() and req not in done:
                done.append(req)
        for req in done:
            req.finish_scores()
        return done

    def _append(self, req: Request, tok: int, burst: list[int] | None = None) -> None:
        """Take one sampled token: stop, or keep it and hand it to the caller (with ``burst``: gather
        it there, handed over by :meth:`_flush`, before any finish event)."""
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        stops = tok in req.stop_ids and not req.ignore_eos
        if stops or (req.constraint is not None and not req.constraint.advance(tok)):
            self._flush(req, burst)
            self._end(req, reason="stop")
            return
        req.output_ids.append(tok)
        if burst is None:
            req.stream.put(StreamEvent((tok,)))
        else:
            burst.append(tok)
        if len(req.output_ids) >= req.max_new_tokens:
            self._flush(req, burst)
            self._end(req, reason="length")  # the last token's forward is never run

    @staticmethod
    def _flush(req: Request, burst: list[int] | None) -> None:
        if burst:
            req.stream.put(StreamEvent(tuple(burst)))
            burst.clear()

    def _fail(self, sr: ScheduledRow, exc: BaseException) -> None:
        self.stats.failed_rows += 1
        if not sr.request.finished:
            self._end(sr.request, error=exc)

    def _end(self, req: Request, reason: str | None = None, error: BaseException | None = None) -> None:
        if req.finished:
            return
        req.status = RequestStatus.FINISHED
        req.finish_reason, req.error = reason, error
        self.scheduler.finish(req)
        try:
            release(req.tail)  # its batched decode row (GPU path), if it holds one
        finally:
            if req.on_finish is not None:
                try:
                    req.on_finish(req)
                except Exception:  # noqa: BLE001 - a hook must not stop the loop
                    log.exception("on_finish of request %d failed", req.id)
            scores = tuple(req.scores) if req.scores is not None and error is None else None
            req.stream.put(StreamEvent(finish_reason=reason, error=error, scores=scores))
