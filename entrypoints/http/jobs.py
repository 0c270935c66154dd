"""Background work of the HTTP API: pipeline runs and long context loads, in one named Ray actor.

Any ingress replica can answer a status poll, and a run outlives the request that started it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Literal

import ray

from agentctx.agents.review_steps import span_citation
from agentctx.config import AgentctxConfig
from agentctx.entrypoints.http.errors import unwrap
from agentctx.pipelines.document_review import case_file_tasks, review_pipeline, section_trees
from agentctx.pipelines.dsl import PipelineSpec
from agentctx.pipelines.report import build_report
from agentctx.pipelines.runner import PipelineCancelled, PipelineError, PipelineRunner
from agentctx.runtime import Runtime
from agentctx.serving.serve.client import ServeReplicaClient

__all__ = ["Job", "LoadPayload", "PipelinePayload", "JobManager", "jobs_actor", "JOBS_ACTOR"]

log = logging.getLogger(__name__)

JOBS_ACTOR = "agentctx-jobs"
_DONE = ("succeeded", "failed", "cancelled")


@dataclass
class Job:
    """One background job as a status poll sees it."""

    id: str
    kind: Literal["load", "pipeline"]
    tenant: str
    context_id: str
    pipeline: str | None = None  # kind "pipeline": the pipeline's name
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] = "queued"
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    result: dict | None = None
    error: str | None = None
    progress: dict | None = None  # kind "load": tokens done / total, tokens per second, ETA (Progress.as_dict)


@dataclass(frozen=True)
class LoadPayload:
    text: str


@dataclass(frozen=True)
class PipelinePayload:
    spec: PipelineSpec
    report: bool  # the document review: return its ReviewReport rather than the raw step outputs
    # The document review's options (review_pipeline's keyword arguments): its spec is made again
    # once the context's text is at hand, with one set of clause tasks per document of a case file.
    review: dict | None = None


class JobManager:
    """Runs jobs in threads: at most ``max_running`` pipelines at a time (the rest queue), loads at once.

    Records of the last ``max_jobs`` jobs are kept.
    """

    def __init__(self, config: AgentctxConfig, model_handle, max_running: int = 2, max_jobs: int = 1000):
        self.cfg = config
        self.client = ServeReplicaClient(model_handle, timeout_s=config.serve.request_timeout_s,
                                         stall_s=config.serve.stall_timeout_s)
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_running)
        self._max_jobs = max_jobs
        self._rt: Runtime | None = None
        self._cancel: dict[str, threading.Event] = {}

    def ping(self) -> bool:
        return True

    def _runtime(self) -> Runtime:
        with self._lock:
            if self._rt is None:
                self._rt = Runtime.connect(self.cfg, self.client)
            return self._rt

    def submit(self, job: Job, payload: LoadPayload | PipelinePayload) -> Job:
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > self._max_jobs:
                old = next((k for k, j in self._jobs.items() if j.status in _DONE), None)
                if old is None:
                    break
                del self._jobs[old]
            self._cancel[job.id] = threading.Event()
            snapshot = replace(job)
        threading.Thread(target=self._run, args=(job, payload), name=f"job-{job.id}", daemon=True).start()
        return snapshot

    def get(self, job_id: str, tenant: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return replace(job) if job is not None and job.tenant == tenant else None

    def list(self, tenant: str, kind: str = "pipeline", pipeline: str | None = None, limit: int = 100
             ) -> list[Job]:
        """The tenant's jobs of a kind (and pipeline), newest first, results left out."""
        with self._lock:
            out = [replace(j, result=None) for j in reversed(self._jobs.values())
                   if j.tenant == tenant and j.kind == kind and (pipeline is None or j.pipeline == pipeline)]
        return out[:limit]

    def cancel(self, job_id: str, tenant: str) -> Job | None:
        """Cancel a queued or running job (a finished one is left as it is); None if not the tenant's."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.tenant != tenant:
                return None
            if job.status not in _DONE:
                event = self._cancel.get(job_id)
                if event is not None:
                    event.set()
                if job.status == "queued":  # never started: it ends now
                    job.status, job.finished_at, job.error = "cancelled", time.time(), "cancelled by the client"
            return replace(job)

    def find_load(self, tenant: str, context_id: str) -> Job | None:
        with self._lock:
            for job in reversed(self._jobs.values()):
                if job.kind == "load" and job.tenant == tenant and job.context_id == context_id:
                    return replace(job)
        return None

    def counts(self, kind: str | None = None) -> dict:
        """Jobs kept, by status (of one kind when given)."""
        with self._lock:
            out: dict[str, int] = {}
            for j in self._jobs.values():
                if kind is None or j.kind == kind:
                    out[j.status] = out.get(j.status, 0) + 1
            return out

    def _set(self, job: Job, **fields) -> None:
        with self._lock:
            for k, v in fields.items():
                setattr(job, k, v)

    def _run(self, job: Job, payload: LoadPayload | PipelinePayload) -> None:
        slots = self._slots if job.kind == "pipeline" else None
        cancel = self._cancel.get(job.id) or threading.Event()
        if slots is not None:
            slots.acquire()
        try:
            with self._lock:
                if cancel.is_set():
                    return  # cancelled while queued (cancel() already marked it)
                job.status, job.started_at = "running", time.time()
            if isinstance(payload, PipelinePayload):
                result = self._run_pipeline(job, payload, cancel)
            else:
                result = self._run_load(job, payload)
            self._set(job, status="succeeded", result=result, finished_at=time.time())
        except PipelineCancelled:
            self._set(job, status="cancelled", error="cancelled by the client", finished_at=time.time())
        except Exception as exc:
            inner = unwrap(exc)
            log.warning("job %s failed: %s: %s", job.id, type(inner).__name__, inner)
            first = (str(inner).strip().splitlines() or [""])[0]
            self._set(job, status="failed", error=f"{type(inner).__name__}: {first}"[:2000], finished_at=time.time())
        finally:
            with self._lock:
                self._cancel.pop(job.id, None)
            if slots is not None:
                slots.release()

    def _run_load(self, job: Job, payload: LoadPayload) -> dict:
        ctx, res = self._runtime().load_context(payload.text, job.tenant,
                                                on_progress=lambda p: self._set(job, progress=p.as_dict()))
        ctx.close()
        return {"num_tokens": res.num_tokens, "num_pages": res.num_pages, "prefilled": res.prefilled,
                "prefill_s": res.prefill_s, "index_s": res.index_s, "total_s": res.total_s}

    def _run_pipeline(self, job: Job, payload: PipelinePayload, cancel: threading.Event) -> dict:
        rt = self._runtime()
        # The route restored the context before it queued the run (ApiService.repair_if_broken); what
        # it lost since (an eviction while queued) is rebuilt from its kept document here, and one
        # that cannot be (ContextLostError) fails the run, saying so.
        rt.restore_context(job.context_id, job.tenant)
        spec, ctx, parts = payload.spec, None, None
        if payload.review is not None:  # the review reads the text: its documents, its section tree
            ctx = rt.attach(job.context_id, job.tenant, holder_id=f"review-{job.id}")
            parts, ids, sections = case_file_tasks(ctx.text)
            spec = review_pipeline(**payload.review, sections=sections, documents=ids)
        try:
            return self._pipeline_result(rt, job, payload, spec, cancel, ctx, parts)
        finally:
            if ctx is not None:
                ctx.close()

    def _pipeline_result(self, rt, job: Job, payload: PipelinePayload, spec: PipelineSpec,
                         cancel: threading.Event, ctx, parts) -> dict:
        result = PipelineRunner(rt, progress=False).run(spec, job.context_id, job.tenant, cancelled=cancel.is_set)
        dead = [n for n, s in result.steps.items() if s.errors and not s.ok_outputs]
        if dead:  # every task of a step failed: the run failed, whatever the other steps gave
            step = result.steps[dead[0]]
            raise PipelineError(f"step {dead[0]!r} failed for all {len(step.errors)} task(s): "
                                f"{step.errors[0].splitlines()[0]}")
        if payload.report and ctx is not None:
            return build_report(result, rt.client.info(), text=ctx.text, sections=section_trees(ctx.text, parts),
                                documents=parts if len(parts) > 1 else None,
                                cite=lambda a, b: span_citation(ctx, a, b)).model_dump(mode="json")
        if payload.report:
            return build_report(result, rt.client.info()).model_dump(mode="json")
        return {"pipeline": result.pipeline, "context_id": job.context_id, "seconds": round(result.seconds, 3),
                "steps": {n: {"outputs": s.outputs, "errors": s.errors, "attempts": s.attempts,
                              "seconds": round(s.seconds, 3), "stats": s.stats} for n, s in result.steps.items()}}


def jobs_actor(cfg: AgentctxConfig, model_handle):
    """The namespace's jobs actor (detached: it outlives the ingress replica that made it)."""
    return ray.remote(JobManager).options(
        name=JOBS_ACTOR, namespace=cfg.store.namespace, get_if_exists=True, lifetime="detached",
        num_cpus=0, max_concurrency=32, max_restarts=1,
    ).remote(cfg, model_handle)
