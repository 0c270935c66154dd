"""Run a PipelineSpec on Ray: agent actors per step, bounded concurrency, retries, timeouts.

The runner holds one context reference for the whole run (so the KV cannot be
freed mid-pipeline even if every agent restarts), starts each step's agent actors
when its dependencies finish, keeps at most ``max_concurrency`` tasks in flight,
retries a failed or timed-out task on a fresh actor up to ``retries`` times, and
releases every actor's reference when its step ends.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from tqdm.auto import tqdm

from agentctx.agents.actor import AgentActor, AgentTaskResult, task_error
from agentctx.agents.base import AgentTask
from agentctx.context import ContextInfo
from agentctx.pipelines.dsl import PipelineSpec, StepSpec

__all__ = ["PipelineRunner", "PipelineResult", "StepResult", "PipelineError", "PipelineCancelled"]

log = logging.getLogger(__name__)


class PipelineError(RuntimeError):
    """A step failed after its retries; the message names the step and the last error."""


def _cancel(ref) -> None:
    """Cancel a task (an actor task cannot be force-cancelled: ask, and kill the actor after)."""
    try:
        ray.cancel(ref)
    except Exception as exc:
        log.debug("cancel: %s", exc)


class PipelineCancelled(RuntimeError):
    """The run was cancelled (``cancelled()`` turned true)."""


@dataclass
class StepResult:
    name: str
    outputs: list[dict | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    attempts: int = 0
    seconds: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)
    agents: int = 0  # agent actors started for the step (replacements not counted)

    @property
    def ok_outputs(self) -> list[dict]:
        return [o for o in self.outputs if o is not None]


@dataclass
class PipelineResult:
    pipeline: str
    context: ContextInfo  # the document the pipeline ran over
    steps: dict[str, StepResult]
    seconds: float

    @property
    def context_id(self) -> str:
        return self.context.context_id

    def outputs(self, step: str) -> list[dict]:
        return self.steps[step].ok_outputs


@dataclass
class _Task:
    step: str
    index: int
    payload: AgentTask
    attempt: int = 0


class PipelineRunner:
    def __init__(self, runtime, *, progress: bool = True, fail_fast: bool = False):
        self.runtime = runtime
        self.progress = progress
        self.fail_fast = fail_fast
        self._holders: dict = {}  # agent actor -> (context id, holder id of its reference)

    # ------------------------------------------------------------------ expansion
    def _tasks(self, step: StepSpec, spec: PipelineSpec, ctx, results: dict[str, StepResult]) -> list[AgentTask]:
        base = dict(step.task)
        if step.inputs:
            base["inputs"] = {n: results[n].ok_outputs for n in step.inputs}
        if step.over is None:
            items = [base]
        elif step.over == "sections":
            per = spec.section_pages or self.runtime.config.section_pages
            items = [dict(base, section=i, pages=pages) for i, pages in enumerate(ctx.section_pages(per))]
        elif step.source_step:
            outs = results[step.source_step].ok_outputs
            if step.when:
                outs = [o for o in outs if o.get(step.when)]
            items = [dict(base, input=o) for o in outs]
        else:
            items = [dict(base, **item) for item in step.over]
        return [AgentTask.model_validate(item) for item in items]

    def _actor(self, step: StepSpec, context_id: str, tenant: str):
        rt = self.runtime
        holder = f"agent-{step.agent.display_name}-{uuid.uuid4().hex[:8]}"
        actor = AgentActor.remote(step.agent, context_id, tenant, rt.client, rt.policy, rt.store, rt.retrieval,
                                  holder)
        self._holders[actor] = (context_id, holder)
        return actor

    # ------------------------------------------------------------------ run
    def run(self, spec: PipelineSpec, context_id: str, tenant: str = "default",
            cancelled: Callable[[], bool] | None = None) -> PipelineResult:
        """Run the pipeline to the end; ``cancelled()`` is polled between rounds (every <= 0.5 s):
        when it turns true, tasks in flight are cancelled, actors and the reference released, and
        ``PipelineCancelled`` raised."""
        t_start = time.perf_counter()
        ctx = self.runtime.attach(context_id, tenant)  # the pipeline's own reference
        results: dict[str, StepResult] = {}
        actors: dict[str, list] = {}
        queue: list[_Task] = []
        in_flight: dict[Any, tuple[_Task, Any, float]] = {}
        remaining: dict[str, int] = {}
        started: dict[str, float] = {}
        order = spec.order()
        by_name = {s.name: s for s in order}
        rr = {}
        bar = tqdm(total=0, desc=spec.name, unit="task", disable=not self.progress)
        try:
            while True:
                if cancelled is not None and cancelled():
                    raise PipelineCancelled(f"pipeline {spec.name!r} was cancelled")
                # Start every step whose dependencies are complete.
                for step in order:
                    if step.name in results or not all(
                        d in results and remaining.get(d, 0) == 0 for d in step.depends_on
                    ):
                        continue
                    tasks = self._tasks(step, spec, ctx, results)
                    results[step.name] = StepResult(step.name, outputs=[None] * len(tasks))
                    remaining[step.name] = len(tasks)
                    started[step.name] = time.perf_counter()
                    bar.total += len(tasks)
                    bar.refresh()
                    if tasks:
                        actors[step.name] = [self._actor(step, context_id, tenant)
                                             for _ in range(min(step.num_agents or spec.max_concurrency,
                                                                len(tasks)))]
                        rr[step.name] = itertools.cycle(range(len(actors[step.name])))
                        results[step.name].agents = len(actors[step.name])
                    queue.extend(_Task(step.name, i, t) for i, t in enumerate(tasks))
                    self._finish_step_if_done(step.name, results, remaining, actors, started)
                if not queue and not in_flight:
                    break
                while queue and len(in_flight) < spec.max_concurrency:
                    task = queue.pop(0)
                    actor = actors[task.step][next(rr[task.step])]
                    ref = actor.run.remote(task.payload)
                    in_flight[ref] = (task, actor, time.perf_counter())
                    task.attempt += 1
                    results[task.step].attempts += 1
                done, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
                now = time.perf_counter()
                for ref in list(in_flight):
                    task, actor, t0 = in_flight[ref]
                    step = by_name[task.step]
                    if ref in done:
                        del in_flight[ref]
                        try:
                            out: AgentTaskResult | None = ray.get(ref)
                            error = out.error
                        except ray.exceptions.RayError as exc:  # actor died: replace it
                            out, error = None, task_error(exc)
                            self._replace_actor(step, actor, actors, context_id, tenant)
                    elif now - t0 > step.timeout_s:
                        del in_flight[ref]
                        _cancel(ref)
                        out, error = None, f"timed out after {step.timeout_s:.0f} s"
                        self._replace_actor(step, actor, actors, context_id, tenant)
                    else:
                        continue
                    res = results[task.step]
                    if error is None:
                        res.outputs[task.index] = out.output
                        for k, v in out.stats.items():
                            res.stats[k] = res.stats.get(k, 0) + v
                    elif task.attempt <= step.retries:
                        log.warning("step %s task %d failed (attempt %d), retrying: %s", task.step, task.index,
                                    task.attempt, error.splitlines()[0])
                        queue.append(task)
                        continue
                    else:
                        res.errors.append(f"task {task.index}: {error}")
                        if self.fail_fast:
                            raise PipelineError(f"step {task.step!r} failed: {error.splitlines()[0]}")
                    remaining[task.step] -= 1
                    bar.update(1)
                    self._finish_step_if_done(task.step, results, remaining, actors, started)
        except BaseException:
            # Cancelled or failed: tasks in flight would hold close() behind them, so the actors are
            # killed at once and their references released here, not left to lease expiry.
            for ref in in_flight:
                _cancel(ref)
            in_flight.clear()
            for name in list(actors):
                self._kill_actors(actors.pop(name))
            raise
        finally:
            bar.close()
            for ref in in_flight:
                _cancel(ref)
            for name in list(actors):
                self._close_actors(actors.pop(name))
            ctx.close()
        return PipelineResult(spec.name, ctx.info, results, time.perf_counter() - t_start)

    def _replace_actor(self, step, actor, actors, context_id, tenant) -> None:
        pool = actors[step.name]
        i = pool.index(actor)
        self._kill_actors([actor])
        pool[i] = self._actor(step, context_id, tenant)

    def _finish_step_if_done(self, name, results, remaining, actors, started) -> None:
        if remaining.get(name, 1) == 0 and name in started:
            results[name].seconds = time.perf_counter() - started.pop(name)
            self._close_actors(actors.pop(name, []))

    def _kill_actors(self, pool: list) -> None:
        for a in pool:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
            context_id, holder = self._holders.pop(a, (None, None))
            if holder is not None:
                try:
                    self.runtime.store.release(context_id, holder)
                except Exception as exc:  # its lease expires instead
                    log.warning("releasing %s: %s", holder, exc)

    def _close_actors(self, pool: list) -> None:
        refs = [a.close.remote() for a in pool]
        try:
            ray.get(refs, timeout=30)
        except Exception as exc:  # a dead actor's references expire with its lease
            log.warning("closing agent actors: %s", exc)
        for a in pool:
            ray.kill(a)
            self._holders.pop(a, None)
