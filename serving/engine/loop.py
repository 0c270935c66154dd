"""The engine loop: one thread per replica owns every request and every forward.

Each iteration of the thread is one step (serving/engine/step.py: schedule, one forward, sample
on the device, postprocess with the step's one host sync).

Callers never wait per token on this thread: :meth:`EngineLoop.submit` queues a request and
returns at once, and tokens reach the request's :class:`TokenStream` as they are sampled.
Detokenization and stop strings happen on the caller's side (serving/engine/local.py); a caller
that is done early calls :meth:`abort`.

Jobs (a document prefill chunk, run through :meth:`call`) go between steps. While requests run,
every second of a job's compute owes them ``step_share`` seconds of steps (2: requests get two
thirds of the replica's time beside a background prefill or restore; the prefill gets all of it
when none runs). A job starts only when nothing is owed, and on a CPU a prefill chunk pays
its debt as it goes: between two of its layers the loop runs the steps owed
(:meth:`between_layers`, serving/runner/layer_breaks.py), so a request never waits for a whole
chunk (seconds at a long document's end) before its next token.

:meth:`step` is public: tests drive the loop without its thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentctx.serving.engine.request import GenerationCancelled, Request
from agentctx.serving.engine.scheduler import Scheduler
from agentctx.serving.engine.step import GRAPH_DECODE_STEPS, EngineStep, LoopStats
from agentctx.serving.runner.batch_forward import Row, StepOutput

__all__ = ["EngineLoop", "LoopStats", "GRAPH_DECODE_STEPS"]

log = logging.getLogger(__name__)
STEP_SHARE = 2.0  # while requests run, seconds of steps owed per second of a job's compute


@dataclass(eq=False)
class _Job:
    fn: Callable[[], object]
    result: object = None
    error: BaseException | None = None
    done: threading.Event = None

    def __post_init__(self) -> None:
        self.done = threading.Event()


class EngineLoop(EngineStep):
    """The thread and the callers' queues around :class:`EngineStep` (whose docstring says what
    ``run_step`` and ``run_greedy`` are)."""

    def __init__(self, run_step: Callable[[list[Row]], StepOutput], scheduler: Scheduler, *,
                 device: torch.device | str = "cpu", name: str = "agentctx-engine", thread: bool = True,
                 run_greedy: Callable[[list[Row], int], torch.Tensor | None] | None = None, decode_steps: int = 1):
        """thread=False: no thread is started; the caller drives :meth:`step` (tests)."""
        super().__init__(run_step, scheduler, device=device, run_greedy=run_greedy, decode_steps=decode_steps)
        self._threaded = thread
        self.name = name
        self._cv = threading.Condition()
        self._inbox: deque[Request] = deque()
        self._aborts: deque[tuple[Request, str]] = deque()
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._stopped = False
        # Seconds of steps owed to running requests for the jobs' compute (module docstring).
        self.step_share = STEP_SHARE
        self._owed_s = 0.0
        self._job_clock: float | None = None  # while a job runs: when its compute last (re)started
        self._in_break = False

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
                # Jobs and steps share the time: while requests run, a job starts only when the
                # steps owed for earlier jobs have run; with none running, nothing is owed.
                if not (self.scheduler.has_work() or self._inbox):
                    self._owed_s = 0.0
                job = self._jobs.popleft() if self._jobs and self._owed_s <= 0 else None
            if job is not None:
                self._run_job(job)
                continue
            if not self._paid_step() and self._jobs:
                self._owed_s = 0.0  # nothing to step: the job goes now

    def _paid_step(self) -> bool:
        """One step (a bug outside the forward fails what is running; the loop goes on), its time
        paid against what is owed; False when there was nothing to run."""
        t0 = time.perf_counter()
        try:
            stepped = self.step()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.exception("the engine loop's step failed; failing the running requests")
            for req in list(self.scheduler.running):
                self._end(req, error=exc)
            stepped = True
        self._pay(time.perf_counter() - t0)
        return stepped

    def _busy(self) -> bool:
        with self._cv:
            return self.scheduler.has_work() or bool(self._inbox)

    def _pay(self, step_s: float) -> None:
        """A step's time pays what is owed; the step that pays the last of it leaves the job a
        credit of what it ran over (at most one step), so a job whose layers are shorter than a
        step is not stopped at every layer. Steps with nothing owed buy no credit."""
        if self._owed_s > 0:
            self._owed_s -= step_s

    def _charge_job(self) -> None:
        """Add the running job's compute since its clock last started to what requests are owed."""
        now = time.perf_counter()
        if self._busy():
            self._owed_s += self.step_share * (now - self._job_clock)
        self._job_clock = now

    def between_layers(self) -> None:
        """Called by a running job between two layers of its forward (serving/runner/layer_breaks.py):
        run the steps owed to the running requests, then let the job go on."""
        if self._job_clock is None or self._in_break or threading.current_thread() is not self._thread:
            return
        self._charge_job()
        self._in_break = True
        try:
            while not self._stopped and self._owed_s > 0 and self._busy():
                if not self._paid_step():
                    break
                self.stats.break_steps += 1
        finally:
            self._in_break = False
            self._job_clock = time.perf_counter()  # the job's own compute resumes now

    def _run_job(self, job: _Job) -> None:
        self._job_clock = time.perf_counter()
        try:
            job.result = job.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            job.error = exc
        finally:
            self._charge_job()
            self._job_clock = None
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

    def step(self) -> bool:
        """Take new requests and aborts, then one step (EngineStep.step)."""
        self._drain()
        return super().step()
