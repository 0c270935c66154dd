"""Restores of broken contexts as background jobs of the ingress, never inline in a request.

A context whose pages or blobs were lost (an eviction, a store-actor restart, a restart of the
whole service) is rebuilt by re-prefilling its kept document (``serving/serve/restore.py``):
under a second for a short one, many minutes for a 60K-token one on a CPU box, so longer than
``serve.request_timeout_s``. A request that awaited it would answer 504 while the restore went
on, and every retry would queue behind it. So the first request that finds a context broken
starts one asyncio task per (tenant, context id); that request and every request for the context
while the task runs wait at most ``serve.restore_wait_s`` for it (a short restore stays
invisible), then answer 503 + ``Retry-After``, ``code: context_restoring``, with the re-prefill's
progress (``Progress.as_dict``, as a load job reports it). A failed restore's error is the answer
of the next request for the context; the request after that may start a new restore.

The jobs live in one ingress replica's event loop: two ingress replicas could each restore the
same context once (the deployment runs one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentctx.entrypoints.http.errors import APIError, retry_headers
from agentctx.kv_store.doc_blob import DOC_BLOB
from agentctx.serving.serve.progress import Progress, ProgressCallback

if TYPE_CHECKING:
    from agentctx.serving.serve.restore import RestoreResult

__all__ = ["RestoreJob", "RestoreJobs", "RunRestore", "is_whole"]

log = logging.getLogger(__name__)

# (context_id, tenant, on_progress) -> the RestoreResult; ``on_progress`` may be called from any thread.
RunRestore = Callable[[str, str, ProgressCallback], Awaitable["RestoreResult"]]


def is_whole(store, rec) -> bool:
    """Every page and the document blob of a stored context are readable now (blocking)."""
    return all(store.has_pages(rec.page_ids)) and not store.missing_blobs(rec.context_id, [DOC_BLOB])


@dataclass
class RestoreJob:
    """One context's restore, as a request or a status poll sees it."""

    context_id: str
    tenant: str
    task: asyncio.Task = field(init=False)  # set by RestoreJobs.start, which needs ``report`` to make it
    started_at: float = field(default_factory=time.time)
    progress: dict | None = None  # Progress.as_dict of the re-prefill; None before its first chunk

    def report(self, p: Progress) -> None:
        self.progress = p.as_dict()  # one reference swap: safe from the worker thread that reports


class RestoreJobs:
    """At most one running restore per (tenant, context id), and what a request does about it.

    ``run`` does one restore (and counts it); ``wait_s``: how long a request waits for a restore
    before answering 503; ``retry_after_s``: the ``Retry-After`` of that answer.
    """

    def __init__(self, run: RunRestore, wait_s: float, retry_after_s: float):
        self._run, self.wait_s, self.retry_after_s = run, wait_s, retry_after_s
        self._jobs: dict[tuple[str, str], RestoreJob] = {}

    def running(self, context_id: str, tenant: str) -> RestoreJob | None:
        """The context's restore while it runs (None when none runs)."""
        job = self._jobs.get((tenant, context_id))
        return job if job is not None and not job.task.done() else None

    def start(self, context_id: str, tenant: str) -> RestoreJob:
        """The context's restore: the one already running or kept failed, else a new one."""
        key = (tenant, context_id)
        job = self._jobs.get(key)
        if job is None:
            job = RestoreJob(context_id, tenant)
            job.task = asyncio.get_running_loop().create_task(self._run(context_id, tenant, job.report),
                                                              name=f"restore-{context_id}")
            job.task.add_done_callback(lambda _t: self._finished(key, job))
            self._jobs[key] = job
            log.info("restore of %s (tenant %s) started in the background", context_id, tenant)
        return job

    async def ensure(self, context_id: str, tenant: str) -> RestoreResult:
        """Restore a context found broken: start its restore (or join the one running), wait up to
        ``wait_s`` for it; its result, its error, or 503 ``context_restoring`` while it runs."""
        self.start(context_id, tenant)
        res = await self.join(context_id, tenant)
        assert res is not None  # the job started above is there for join to take
        return res

    async def join(self, context_id: str, tenant: str) -> RestoreResult | None:
        """None when the context has no restore; else wait up to ``wait_s`` for it: its result,
        its error (taken: the next call starts afresh), or 503 ``context_restoring`` while it runs."""
        key = (tenant, context_id)
        job = self._jobs.get(key)
        if job is None:
            return None
        if not job.task.done() and self.wait_s > 0:
            await asyncio.wait({job.task}, timeout=self.wait_s)  # a waiter's cancellation leaves the task be
        if not job.task.done() or job.task.cancelled():  # cancelled: the loop is going down
            raise self.restoring_error(job)
        if self._jobs.get(key) is job:
            del self._jobs[key]
        return job.task.result()

    def forget(self, context_id: str, tenant: str) -> None:
        """Drop a failed restore's error (the context was uploaded again or deleted); a running one stays."""
        job = self._jobs.get((tenant, context_id))
        if job is not None and job.task.done():
            del self._jobs[(tenant, context_id)]

    def restoring_error(self, job: RestoreJob) -> APIError:
        p = job.progress
        done = f" ({p['tokens_done']} of {p['tokens_total']} tokens re-prefilled)" if p else ""
        return APIError(503, f"context {job.context_id!r} is being restored{done}; retry later",
                        type="service_unavailable", code="context_restoring", param="context_id",
                        headers=retry_headers(self.retry_after_s),
                        extra={"progress": p, "restore_started_at": round(job.started_at, 3)})

    def _finished(self, key: tuple[str, str], job: RestoreJob) -> None:
        # exception() retrieves the error here, so asyncio never logs it as lost; a cancelled task
        # (the loop shutting down) is dropped like a finished one.
        exc = None if job.task.cancelled() else job.task.exception()
        if exc is None:
            if self._jobs.get(key) is job:  # done: later requests find the context whole
                del self._jobs[key]
            log.info("restore of %s done in %.1f s", job.context_id, time.time() - job.started_at)
        else:  # kept: the next request for the context answers with this error
            log.warning("restore of %s failed: %s: %s", job.context_id, type(exc).__name__, exc)
