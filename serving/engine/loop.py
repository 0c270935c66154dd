"""The engine loop: one thread per replica owns every request and every forward.

Each iteration of the thread is one step (serving/engine/step.py: schedule, one forward, sample
on the device, postprocess with the step's one host sync).

Callers never wait per token on this thread: :meth:`EngineLoop.submit` queues a request and
returns at once, and tokens reach the request's :class:`TokenStream` as they are sampled.
Detokenization and stop strings happen on the caller's side (serving/engine/local.py); a caller
that is done early calls :meth:`abort`.

Jobs (a document prefill chunk, run through :meth:`call`) go between steps; while requests run,
a job waits until the steps since the last job have had ``step_share`` times as long as that job
took (1: requests and a background prefill or restore share the replica's time half and half
while requests run; the prefill gets all of it when none does).

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
STEP_SHARE = 1.0  # while requests run, steps get this many times a job's time between two jobs


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
        self._last_job_s = 0.0  # how long the last job took, and the steps' time since
        self._steps_since_job_s = 0.0
        # Steps' time owed per second of job while requests run (module docstring). 2, and a grace
        # for a client's next request, were tried: no measurable change (BENCHMARKS §4g).
        self.step_share = STEP_SHARE

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
                # steps since the last job have had step_share times as long as that job took.
                busy = self.scheduler.has_work() or bool(self._inbox)
                owed = busy and self._steps_since_job_s < self.step_share * self._last_job_s
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
                self._steps_since_job_s = self.step_share * self._last_job_s  # nothing to step: the job goes now
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

    def step(self) -> bool:
        """Take new requests and aborts, then one step (EngineStep.step)."""
        self._drain()
        return super().step()
