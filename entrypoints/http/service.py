"""ApiService: what the routes call. The runtime's pieces, auth, metrics, retries and limits.

Blocking calls (Redis, ``ray.get``) run on a private thread pool so the ingress event loop
stays free; model calls are awaited on the Serve handle. A request whose model replica dies
is retried on another (or its restarted self) while no output has been sent (failover.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from pydantic import ValidationError
from ray import serve

from agentctx.config import AgentctxConfig
from agentctx.entrypoints.auth import ApiKeyAuth
from agentctx.entrypoints.http.errors import APIError, is_replica_failure, map_exception, unwrap, validation_error
from agentctx.entrypoints.http.failover import Failover
from agentctx.entrypoints.http.jobs import jobs_actor
from agentctx.entrypoints.http.restore_jobs import RestoreJobs, is_whole
from agentctx.entrypoints.metrics import HttpMetrics
from agentctx.kv_store.errors import BlobNotFoundError, ContextLostError, ContextNotFoundError, StoreError
from agentctx.retrieval.policy import SelectionPolicy
from agentctx.runtime import Runtime, context_id_for, retrieval_actor
from agentctx.serving.serve.client import ServeReplicaClient
from agentctx.serving.serve.deployments import REPLICA_APP
from agentctx.serving.serve.progress import ProgressCallback
from agentctx.serving.serve.restore import RestoreResult
from agentctx.serving.types import GenerateRequest, GenerateResult

__all__ = ["ApiService", "service_of", "tenant_of", "wait", "EMPTY_DOCUMENT"]

log = logging.getLogger(__name__)

MODEL_DEPLOYMENT = "ModelReplica"
EMPTY_DOCUMENT = ""  # the no-document context: the BOS token alone, no placeholder text


async def wait(ref):
    """Await a Ray ObjectRef or a Serve response (both are awaitables)."""
    return await ref


class ApiService:
    """What the routes call: the runtime's pieces, auth, metrics, retries and limits.

    Blocking calls (Redis, ``ray.get``) run on a private thread pool so the
    ingress event loop stays free; model calls are awaited on the Serve handle.
    """

    def __init__(self, cfg: AgentctxConfig, model_handle=None):
        self.cfg = cfg
        self.auth = ApiKeyAuth(cfg.serve.api_keys)
        self.metrics = HttpMetrics()
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentctx-http")
        if model_handle is None:
            model_handle = serve.get_deployment_handle(MODEL_DEPLOYMENT, app_name=REPLICA_APP)
        self.handle = model_handle
        self.client = ServeReplicaClient(model_handle, timeout_s=cfg.serve.request_timeout_s,
                                         stall_s=cfg.serve.stall_timeout_s)
        self.retrieval = retrieval_actor(cfg)
        self.jobs = jobs_actor(cfg, model_handle)
        self._rt = None
        self._rt_lock = threading.Lock()
        self._model_id: str | None = None
        self._max_token_bytes: int | None = None
        self.has_chat_template = False
        self._empty: dict[str, str] = {}
        self._load_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.restores = RestoreJobs(self._restore, cfg.serve.restore_wait_s, cfg.serve.retry_after_s)
        self.started_at = int(time.time())
        # The first request of a started (or restarted) service would connect the store, reach the
        # store actor and make Serve's first call to the model replicas: ~1.2 s on a 2-core box,
        # against 0.02 s for the same status read after it. Do that now, in the background.
        self.warmed = self.pool.submit(self._warm_up)

    def _warm_up(self) -> None:
        """Connect the runtime, touch the store and the replicas; a failure is left to the first
        request, which meets (and reports) it again."""
        try:
            self.runtime().store.ping(timeout_s=60.0)  # Redis and the store actor, as /readyz asks them
            self._take_info(self.client.info())
        except Exception as exc:  # noqa: BLE001 - nothing depends on it
            log.info("ingress warm-up did not finish (%s: %s); the first request connects", type(exc).__name__, exc)

    # ------------------------------------------------------------------ plumbing
    @property
    def retry_after_s(self) -> float:
        return self.cfg.serve.retry_after_s

    @property
    def body_limit(self) -> int:
        return self.cfg.serve.max_request_bytes

    def runtime(self):
        """The Runtime view of the cluster (connects the store on first use; blocking)."""
        with self._rt_lock:
            if self._rt is None:
                self._rt = Runtime.connect(self.cfg, self.client, retrieval=self.retrieval)
            return self._rt

    async def call(self, fn, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def close_later(self, ctx) -> None:
        """Release a context reference without awaiting (safe in a cancelled task's finally)."""
        if ctx is not None:
            try:
                self.pool.submit(ctx.close)
            except RuntimeError:  # pool shut down
                ctx.close()

    async def model_id(self) -> str:
        if self._model_id is None:
            self._take_info(await self.model_call(self.client.ainfo()))
        return self._model_id

    def _take_info(self, info: dict) -> None:
        """Keep what the routes need from a replica's ``info``."""
        self._max_token_bytes = int(info.get("max_token_bytes") or 0) or None
        self.has_chat_template = bool(info.get("chat_template"))
        self._model_id = info["model_id"]
        self.metrics.replicas.update(info)

    @property
    def known_model_id(self) -> str | None:
        """The model id once a call has fetched it (no call here)."""
        return self._model_id

    async def model_call(self, resp, timeout_s: float | None = None):
        """Await a replica call (a ``ServeReplicaClient.a*`` response) within a deadline; cancel it
        when the deadline passes or the caller goes away."""
        try:
            return await asyncio.wait_for(wait(resp), timeout_s or self.cfg.serve.request_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            resp.cancel()
            raise

    # ------------------------------------------------------------------ contexts
    async def attach(self, context_id: str, tenant: str):
        """An open reference to a context; 503 ``context_restoring`` while its restore runs (past the
        short wait), the restore's error if it failed since the last request."""
        await self.restores.join(context_id, tenant)
        rt = await self.call(self.runtime)
        return await self.call(rt.attach, context_id, tenant, None, f"http-{uuid.uuid4().hex[:12]}")

    async def load(self, text: str, tenant: str, allow_empty: bool = False):
        """Load (or reattach, rebuilding what it lost) synchronously; returns the LoadResult (the
        reference is closed)."""
        model_id = await self.model_id()
        key = (tenant, context_id_for(model_id, tenant, text))
        lock = self._load_locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:  # one prefill per document even when uploaded twice at once
                rt = await self.call(self.runtime)
                try:
                    ctx, res = await self.call(rt.load_context, text, tenant, allow_empty=allow_empty)
                except BaseException:
                    self.metrics.loads.labels("failed").inc()
                    raise
                self.close_later(ctx)
                self.restores.forget(res.context_id, tenant)  # the upload rebuilt it: an earlier failure is moot
        finally:
            if not lock.locked():
                self._load_locks.pop(key, None)
        self.metrics.loads.labels("prefilled" if res.prefilled else "reattached").inc()
        return res

    def forget_empty(self, context_id: str | None = None, tenant: str | None = None) -> None:
        """Drop the remembered empty document of a tenant, or whichever one is ``context_id``."""
        for t, c in list(self._empty.items()):
            if t == tenant or c == context_id:
                self._empty.pop(t, None)

    async def empty_context_id(self, tenant: str) -> str:
        """The id of the tenant's built-in no-document context (whether loaded or not)."""
        return context_id_for(await self.model_id(), tenant, EMPTY_DOCUMENT)

    async def check_user_context(self, context_id: str, tenant: str) -> None:
        """The tenant's built-in no-document context is not a context the user uploaded: the
        context routes neither list it nor answer for it (404, as for any unknown id)."""
        if context_id == await self.empty_context_id(tenant):
            raise ContextNotFoundError(context_id)

    async def empty_context(self, tenant: str) -> str:
        """The tenant's built-in empty document (OpenAI requests without ``context_id``)."""
        cid = self._empty.get(tenant)
        if cid is None:
            res = await self.load(EMPTY_DOCUMENT, tenant, allow_empty=True)
            cid = self._empty[tenant] = res.context_id
        return cid

    async def repair(self, context_id: str, tenant: str) -> int:
        """Put back a context's lost pages and blobs from its kept document, through its one background
        restore (``restore_jobs.py``); returns pages put back. 503 ``context_restoring`` when the
        restore outlasts ``serve.restore_wait_s``; ``ContextLostError`` when nothing to rebuild it from
        remains."""
        return (await self.restores.ensure(context_id, tenant)).pages_put

    async def repair_if_broken(self, context_id: str, tenant: str) -> None:
        """Before work handed to the jobs actor (a pipeline run): a context that lost pages or its
        document is restored here, by the same background restore as a query's, so that the run
        starts on a whole context and the restore is counted once. A context that cannot be rebuilt
        is left to the run, which fails saying so (``ContextLostError``), as a run's failures do."""
        try:
            await self.restores.join(context_id, tenant)
            rt = await self.call(self.runtime)
            rec = await self.call(rt.store.get_record, context_id, tenant)
            if not await self.call(is_whole, rt.store, rec):
                await self.repair(context_id, tenant)
        except Exception as exc:
            if not isinstance(unwrap(exc), ContextLostError):
                raise

    async def _restore(self, context_id: str, tenant: str, on_progress: ProgressCallback) -> RestoreResult:
        """One restore, as a ``RestoreJobs`` task runs it: the replica streams its re-prefill's
        progress, and the call fails only after ``serve.stall_timeout_s`` without any, however long
        the document (not after ``request_timeout_s``: no request waits on it)."""
        res = await self.call(self.client.restore_context, context_id, tenant, None, on_progress)
        if res.repaired:
            self.metrics.restores.labels("prefilled" if res.prefilled else "republished").inc()
        return res

    # ------------------------------------------------------------------ planning
    def policy_for(self, dense: bool, budget_fraction: float | None, top_k_pages: int | None):
        """None = dense; else the configured policy with the request's budget/top-k (422 if invalid)."""
        if dense:
            return None
        base = self.cfg.retrieval
        if budget_fraction is None and top_k_pages is None:
            return base
        fields = base.model_dump()
        if budget_fraction is not None:
            fields.update(budget_fraction=budget_fraction, budget_tokens=None, top_k_pages=None)
        else:
            fields.update(top_k_pages=top_k_pages, budget_fraction=None, budget_tokens=None)
        try:
            return SelectionPolicy.model_validate(fields)
        except ValidationError as exc:
            raise validation_error(exc) from None

    async def plan(self, ctx, query: str, policy, param: str = "budget_fraction"):
        """The AttendPlan of a query (None when dense)."""
        if policy is None:
            return None
        for attempt in (0, 1):
            ref = self.retrieval.plan.remote(ctx.context_id, ctx.tenant, query, policy)
            try:
                return await asyncio.wait_for(wait(ref), self.cfg.serve.request_timeout_s)
            except asyncio.TimeoutError:
                ray.cancel(ref)
                raise self.error(TimeoutError("retrieval did not answer in time")) from None
            except Exception as exc:
                inner = unwrap(exc)
                if attempt == 0 and isinstance(inner, BlobNotFoundError):
                    # The document blob went with an earlier store actor: rebuild it, then plan again.
                    await self.repair(ctx.context_id, ctx.tenant)
                    continue
                self._plan_error(inner, param)

    def _plan_error(self, inner: BaseException, param: str):
        if isinstance(inner, ValueError) and not isinstance(inner, StoreError):
            # e.g. a budget below the mandatory sink + recent pages
            raise APIError(422, str(inner), code="invalid_budget", param=param) from None
        raise self.error(inner) from None

    async def check_document_bytes(self, num_bytes: int, param: str) -> None:
        """413 for a document whose UTF-8 size alone proves it over ``model.max_context_tokens``
        (no token stands for more than the tokenizer's longest token), before anything tokenizes it."""
        await self.model_id()
        if self._max_token_bytes is None:
            return
        tokens = self.cfg.model.max_context_tokens
        limit = tokens * self._max_token_bytes
        if num_bytes > limit:
            raise APIError(413, f"document of {num_bytes} bytes is over the {tokens}-token limit (at most "
                                f"{limit} bytes with this tokenizer)", code="context_too_long", param=param,
                           limit=limit)

    def check_max_tokens(self, value: int, param: str) -> int:
        limit = self.cfg.serve.max_new_tokens
        if value > limit:
            raise APIError(422, f"{param} must be <= {limit}", code="less_than_equal", param=param, limit=limit)
        return value

    async def replica_live(self, timeout_s: float) -> bool:
        """Whether a model replica answers a cheap call within ``timeout_s`` (a dead one's replacement)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.model_call(self.client.ainfo(), timeout_s=max(0.05, deadline - time.monotonic()))
                return True
            except Exception as exc:
                if time.monotonic() + 0.2 >= deadline or not (
                        isinstance(exc, asyncio.TimeoutError) or is_replica_failure(exc)):
                    return False
                await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ generation
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """One generation; a dead replica is retried until a replacement answers (or 503)."""
        tries = Failover(self.cfg.serve.request_timeout_s, self.retry_after_s, self.repair, self.replica_live)
        while True:
            try:
                return await self.model_call(self.client.agenerate(req),
                                             timeout_s=max(0.01, tries.deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise tries.timeout_error() from None
            except Exception as exc:
                inner = unwrap(exc)
                if await tries.recover(req, inner, "model replica failed"):
                    continue
                raise self.error(inner) from None

    async def stream(self, req: GenerateRequest) -> AsyncIterator[tuple[str, Any]]:
        """``("delta", text)``... then ``("result", GenerateResult)``; retried while nothing was sent."""
        tries = Failover(self.cfg.serve.request_timeout_s, self.retry_after_s, self.repair, self.replica_live)
        while True:
            gen = self.client.astream_events(req)
            sent = False
            try:
                while True:
                    remaining = tries.deadline - time.monotonic()
                    if remaining <= 0:
                        raise asyncio.TimeoutError()
                    try:
                        kind, value = await asyncio.wait_for(gen.__anext__(), remaining)
                    except StopAsyncIteration:
                        raise APIError(502, "the model stream ended without a result", type="internal_error",
                                       code="stream_truncated") from None
                    sent = True
                    yield kind, value
                    if kind == "result":
                        return
            except (GeneratorExit, asyncio.CancelledError):
                gen.cancel()
                raise
            except asyncio.TimeoutError:
                gen.cancel()
                raise tries.timeout_error() from None
            except Exception as exc:
                gen.cancel()
                inner = unwrap(exc)
                if not sent and await tries.recover(req, inner, "model replica failed before streaming"):
                    continue
                raise self.error(inner) from None

    # ------------------------------------------------------------------ errors
    def error(self, exc: BaseException) -> APIError:
        return map_exception(exc, self.retry_after_s)

    def count(self, err: APIError) -> APIError:
        """Record a 503/504 that goes out to a client."""
        if err.status in (503, 504):
            self.metrics.rejections.labels(err.code or "unavailable").inc()
        return err


def service_of(request) -> ApiService:
    """The ApiService of the app serving this request (set by ``create_app``)."""
    return request.app.state.svc


def tenant_of(request) -> str:
    """The caller's tenant (set by the Guard from the API key)."""
    return request.state.tenant
