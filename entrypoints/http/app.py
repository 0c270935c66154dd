"""HTTP API: a FastAPI app behind a Ray Serve ingress deployment.

Routes (every route but ``/healthz`` needs ``Authorization: Bearer KEY`` when
``serve.api_keys`` is set; the key selects the tenant, and a tenant sees only
its own contexts and runs — anything else is a 404, the same 404 as a missing id):

====================================  ===========================================================
``POST   /v1/contexts``               upload a document: JSON ``{"text": ...}`` or a multipart
                                      file (part ``file``). 201 (prefilled) / 200 (already
                                      loaded). ``"async": true`` (or a form field ``async=true``,
                                      or a document over 200,000 characters) answers 202 at once
                                      with ``status_url``; poll it until ``status`` is ``ready``.
``GET    /v1/contexts``               the tenant's context ids
``GET    /v1/contexts/{id}``          tokens, pages, status (``ready`` / ``loading`` / ``failed``)
``DELETE /v1/contexts/{id}``          drop it (pages are freed when the last holder releases)
``POST   /v1/contexts/{id}/query``    question -> plan (pages attended, utilization) + answer;
                                      ``"stream": true`` gives server-sent events ``plan``,
                                      ``delta``..., ``done`` (or ``error``)
``POST   /v1/pipelines/{name}/runs``  run ``document_review``, a ``pipelines/<name>.yaml`` (or
                                      ``$AGENTCTX_PIPELINES_DIR/<name>.yaml``) or an inline
                                      ``spec`` in the background; 202 + ``status_url``
``GET    /v1/pipelines/{name}/runs/{run_id}``  status and, when done, the result
``POST   /v1/completions``            OpenAI legacy completions (+ ``context_id`` extension)
``POST   /v1/chat/completions``       OpenAI chat completions (+ ``context_id`` extension)
``GET    /v1/models``                 the served model
``GET    /metrics``                   Prometheus text
``GET    /healthz``                   liveness, no auth
====================================  ===========================================================

OpenAI routes without ``context_id`` answer over a tiny built-in document,
``"(no document)"``, created once per tenant: the model has no document to read,
but plain OpenAI clients work unchanged. ``stream: true`` gives OpenAI chunks
and ``data: [DONE]``.

Errors are JSON ``{"error": {"message", "type", "code", "param", "limit"}}``:
400 malformed body (bad JSON, invalid UTF-8, lone surrogates) or unsupported
parameter, 401 missing/unknown key, 404 unknown id or route, 413 body over
``serve.max_request_bytes`` or document over ``model.max_context_tokens``, 415
wrong content type, 422 a field out of range (``param`` + ``limit``), 503 +
``Retry-After`` when the model queue is full (Serve ``max_queued_requests``
exceeded: ``BackPressureError``), the KV store is unreachable
(``StoreUnavailableError``) or no model replica answers within 25 s, 504 past
``serve.request_timeout_s``. A replica that dies mid-request is retried on
another (or its restarted self) while no output has been sent; a stream that
already sent text ends with an ``error`` event instead.

Start it with ``agentctx serve --config deploy/agentctx.yaml`` (``serve_forever``)
or ``serve run deploy/serve.yaml`` (``app_builder``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import signal
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from ray import serve
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import get_route_path

from agentctx.common import settings
from agentctx.config import AgentctxConfig, load_config
from agentctx.entrypoints.auth import DEFAULT_TENANT, ApiKeyAuth
from agentctx.serving.deployments import REPLICA_APP, replica_app
from agentctx.entrypoints.schemas import (
    CONTEXT_ID_RE,
    MAX_PROMPT_CHARS,
    PIPELINE_NAME_RE,
    RUN_ID_RE,
    ChatCompletionRequest,
    CompletionRequest,
    ContextResponse,
    CreateContextRequest,
    PipelineRunRequest,
    PipelineRunResponse,
    PlanOut,
    QueryRequest,
    QueryResponse,
    validation_error_detail,
)
from agentctx.entrypoints.metrics import HttpMetrics
from agentctx.serving.types import GenerateRequest, GenerateResult

__all__ = [
    "create_app", "HttpIngress", "ingress_app", "app_builder", "serve_forever", "start_http", "stop_http",
    "ApiService", "APIError", "JobManager", "HTTP_APP", "JOBS_ACTOR", "EMPTY_DOCUMENT",
]

log = logging.getLogger(__name__)

HTTP_APP = "agentctx-http"
JOBS_ACTOR = "agentctx-jobs"
MODEL_DEPLOYMENT = "ModelReplica"
EMPTY_DOCUMENT = "(no document)\n"
ASYNC_LOAD_CHARS = 200_000       # larger uploads always load in the background (202)
INGRESS_MAX_ONGOING = 256        # requests one ingress replica serves at once (it only awaits)
REPLICA_RETRY_S = 25.0           # how long a request waits for a dead replica to be replaced
FAILOVER_GRACE_S = 3.0           # a request retried after a replica death ends by then (+ the above)
OPEN_PATHS = frozenset({"/healthz"})
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_QA_STOP = ("\n\n", "\nQuestion:")
_CHAT_STOP = ("\nUser:",)


# ============================================================================ errors
class APIError(Exception):
    """An error with its HTTP answer; ``map_exception`` turns anything else into one."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, limit: int | float | None = None, headers: dict | None = None,
                 extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type, code
        self.param, self.limit, self.headers, self.extra = param, limit, dict(headers or {}), extra or {}

    def body(self) -> dict:
        err = {"message": self.message, "type": self.type, "code": self.code, "param": self.param}
        if self.limit is not None:
            err["limit"] = self.limit
        err.update(self.extra)
        return {"error": err}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers or None)


def _retry_headers(seconds: float) -> dict:
    return {"Retry-After": str(max(0, math.ceil(seconds)))}


def _unwrap(exc: BaseException) -> BaseException:
    """The user exception inside Ray's task-error wrappers."""
    for _ in range(8):
        cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
        if cause is None or cause is exc:
            break
        exc = cause
    return exc


def _is_replica_failure(exc: BaseException) -> bool:
    from ray.serve.exceptions import DeploymentUnavailableError

    exc = _unwrap(exc)
    return isinstance(exc, (ray.exceptions.RayActorError, DeploymentUnavailableError,
                            ray.exceptions.OwnerDiedError)) or type(exc).__name__ == "ReplicaUnavailableError"


def map_exception(exc: BaseException, retry_after_s: float = 1.0) -> APIError:
    """Every failure as an HTTP answer: store and replica outages are 503 + Retry-After, never 500."""
    from ray.serve.exceptions import BackPressureError

    from agentctx.kv_store.errors import (
        ContextExistsError,
        ContextNotFoundError,
        InvalidInputError,
        PagesMissingError,
        StoreError,
        StoreUnavailableError,
    )
    from agentctx.serving.types import ContextTooLongError, EmptyInputError

    exc = _unwrap(exc)
    retry = _retry_headers(retry_after_s)
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, BackPressureError):
        ra = exc.retry_after_s if getattr(exc, "retry_after_s", None) is not None else retry_after_s
        return APIError(503, "the model is busy (request queue full); retry later", type="server_busy",
                        code="busy", headers=_retry_headers(ra))
    if isinstance(exc, ContextNotFoundError):
        return APIError(404, f"context {exc.context_id!r} not found", type="not_found", code="context_not_found",
                        param="context_id")
    if isinstance(exc, StoreUnavailableError) or (isinstance(exc, StoreError) and exc.retryable):
        return APIError(503, "the KV store is unavailable; retry later", type="service_unavailable",
                        code="store_unavailable", headers=retry)
    if isinstance(exc, PagesMissingError):
        return APIError(503, "context pages are being restored; retry later", type="service_unavailable",
                        code="pages_missing", headers=retry)
    if isinstance(exc, ContextExistsError):
        return APIError(409, str(exc), code="context_exists")
    if isinstance(exc, InvalidInputError):
        return APIError(400, str(exc), code="invalid_input")
    if isinstance(exc, ContextTooLongError):
        return APIError(413, str(exc), code="context_too_long", param="text")
    if isinstance(exc, EmptyInputError):
        return APIError(422, str(exc), code="empty_input")
    if _is_replica_failure(exc):
        return APIError(503, "no model replica is available; retry later", type="service_unavailable",
                        code="replica_unavailable", headers=retry)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ray.exceptions.GetTimeoutError)):
        return APIError(504, "the model did not answer in time", type="timeout", code="timeout", headers=retry)
    log.error("unexpected error while serving a request", exc_info=exc)
    return APIError(500, "internal error", type="internal_error", code="internal_error")


def _validation(exc: ValidationError, prefix: str = "") -> APIError:
    d = validation_error_detail(exc, prefix)
    return APIError(422, d["message"], code=d["code"], param=d["param"], limit=d["limit"],
                    extra={"errors": d["errors"]})


# ============================================================================ body parsing
async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) past ``limit`` bytes whatever Content-Length claims."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"request body over {limit} bytes", code="request_too_large", param="body",
                           limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def decode_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8 only, no NaN/Infinity, no lone surrogates; every failure a 400."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"body is not valid UTF-8 ({exc.reason} at byte {exc.start})", code="invalid_utf8",
                       param="body") from None
    if not text.strip():
        raise APIError(400, "body is empty; send a JSON object", code="invalid_json", param="body")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise APIError(400, "body is nested too deeply", code="invalid_json", param="body") from None
    except ValueError as exc:  # JSONDecodeError, huge integers, NaN
        raise APIError(400, f"body is not valid JSON: {exc}", code="invalid_json", param="body") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise APIError(400, "body holds an invalid Unicode string (lone surrogate escape)", code="invalid_unicode",
                       param="body") from None
    except RecursionError:
        raise APIError(400, "body is nested too deeply", code="invalid_json", param="body") from None
    return obj


def validate_model(model: type[BaseModel], obj: Any) -> Any:
    if not isinstance(obj, dict):
        raise APIError(422, "body must be a JSON object", code="invalid_type", param="body")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise _validation(exc) from None


def _check_json_type(request: Request) -> None:
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"content type {media!r} not supported; send application/json",
                       code="unsupported_media_type", param="content-type")


async def read_json(request: Request, model: type[BaseModel], limit: int) -> Any:
    _check_json_type(request)
    return validate_model(model, decode_json(await read_body(request, limit)))


def parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[bytes, str | None]]:
    """``name -> (bytes, filename)`` of a multipart/form-data body (stdlib parser, no extra dependency)."""
    from email import policy
    from email.parser import BytesParser

    try:
        head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    except UnicodeEncodeError:
        raise APIError(400, "malformed multipart content type", code="invalid_multipart", param="content-type") from None
    try:
        msg = BytesParser(policy=policy.HTTP).parsebytes(head + body)
        if not msg.is_multipart():
            raise ValueError("not multipart")
        parts: dict[str, tuple[bytes, str | None]] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if not isinstance(name, str) or not name:
                continue
            payload = part.get_payload(decode=True) or b""
            parts.setdefault(name, (payload, part.get_filename()))
        return parts
    except APIError:
        raise
    except Exception:
        raise APIError(400, "malformed multipart/form-data body", code="invalid_multipart", param="body") from None


def _check_id(value: str, pattern, param: str) -> str:
    if not pattern.match(value) or ".." in value:
        raise APIError(400, f"malformed {param}", code=f"invalid_{param}", param=param)
    return value


def _bool_field(raw: bytes | None, param: str) -> bool:
    if raw is None:
        return False
    v = raw.decode("latin-1").strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("", "0", "false", "no", "off"):
        return False
    raise APIError(422, f"{param} must be true or false", code="invalid_type", param=param)


def sse(data: dict | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode("utf-8")


# ============================================================================ the service
def _make_runtime(cfg: AgentctxConfig, client, retrieval):
    from agentctx.kv_store import KVStore
    from agentctx.runtime import Runtime

    store = KVStore.connect(cfg.store.redis_url, namespace=cfg.store.namespace, budget_bytes=cfg.store.budget_bytes,
                            lease_ttl_s=cfg.store.lease_ttl_s)
    return Runtime(cfg, store, client, retrieval, owns_ray=False)


def _retrieval_actor(cfg: AgentctxConfig):
    from agentctx.retrieval_service import RetrievalService
    from agentctx.runtime import RETRIEVAL_ACTOR

    return ray.remote(RetrievalService).options(
        name=RETRIEVAL_ACTOR, namespace=cfg.store.namespace, get_if_exists=True, num_cpus=0
    ).remote(cfg.model.page_size, cfg.section_pages, cfg.store.redis_url, cfg.store.namespace)


def _jobs_actor(cfg: AgentctxConfig, model_handle):
    return ray.remote(JobManager).options(
        name=JOBS_ACTOR, namespace=cfg.store.namespace, get_if_exists=True, lifetime="detached",
        num_cpus=0, max_concurrency=32, max_restarts=1,
    ).remote(cfg.model_dump(), model_handle)


class ApiService:
    """What the routes call: the runtime's pieces, auth, metrics, retries and limits.

    Blocking calls (Redis, ``ray.get``) run on a private thread pool so the
    ingress event loop stays free; model calls are awaited on the Serve handle.
    """

    def __init__(self, cfg: AgentctxConfig, model_handle=None):
        from agentctx.serving.client import ServeReplicaClient

        self.cfg = cfg
        self.auth = ApiKeyAuth(cfg.serve.api_keys)
        self.metrics = HttpMetrics()
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentctx-http")
        if model_handle is None:
            model_handle = serve.get_deployment_handle(MODEL_DEPLOYMENT, app_name=REPLICA_APP)
        self.handle = model_handle
        self.client = ServeReplicaClient(model_handle, timeout_s=cfg.serve.request_timeout_s)
        self.retrieval = _retrieval_actor(cfg)
        self.jobs = _jobs_actor(cfg, model_handle)
        self._rt = None
        self._rt_lock = threading.Lock()
        self._model_id: str | None = None
        self._empty: dict[str, str] = {}
        self._load_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.started_at = int(time.time())

    # ------------------------------------------------------------------ plumbing
    @property
    def retry_after_s(self) -> float:
        return self.cfg.serve.retry_after_s

    def runtime(self):
        """The Runtime view of the cluster (connects the store on first use; blocking)."""
        with self._rt_lock:
            if self._rt is None:
                self._rt = _make_runtime(self.cfg, self.client, self.retrieval)
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
            info = await self._model_call("info")
            self._model_id = info["model_id"]
            self.metrics.replicas.update(info)
        return self._model_id

    async def _model_call(self, method: str, *args, context_id: str | None = None, timeout_s: float | None = None):
        h = self.handle.options(multiplexed_model_id=context_id) if context_id else self.handle
        resp = getattr(h, method).remote(*args)
        try:
            return await asyncio.wait_for(_await(resp), timeout_s or self.cfg.serve.request_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            resp.cancel()
            raise

    # ------------------------------------------------------------------ contexts
    async def attach(self, context_id: str, tenant: str):
        rt = await self.call(self.runtime)
        return await self.call(rt.attach, context_id, tenant, None, f"http-{uuid.uuid4().hex[:12]}")

    async def load(self, text: str, tenant: str):
        """Load (or reattach) synchronously; returns the LoadResult (the reference is closed)."""
        model_id = await self.model_id()
        from agentctx.runtime import context_id_for

        key = (tenant, context_id_for(model_id, tenant, text))
        lock = self._load_locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:  # one prefill per document even when uploaded twice at once
                rt = await self.call(self.runtime)
                try:
                    ctx, res = await self.call(rt.load_context, text, tenant)
                except BaseException:
                    self.metrics.loads.labels("failed").inc()
                    raise
                self.close_later(ctx)
        finally:
            if not lock.locked():
                self._load_locks.pop(key, None)
        self.metrics.loads.labels("prefilled" if res.prefilled else "reattached").inc()
        return res

    async def empty_context(self, tenant: str) -> str:
        """The tenant's built-in empty document (OpenAI requests without ``context_id``)."""
        cid = self._empty.get(tenant)
        if cid is None:
            res = await self.load(EMPTY_DOCUMENT, tenant)
            cid = self._empty[tenant] = res.context_id
        return cid

    async def repair(self, context_id: str, tenant: str) -> int:
        return await self._model_call("repair_context", context_id, tenant, context_id=context_id)

    # ------------------------------------------------------------------ planning
    def policy_for(self, dense: bool, budget_fraction: float | None, top_k_pages: int | None):
        """None = dense; else the configured policy with the request's budget/top-k (422 if invalid)."""
        from agentctx.retrieval.policy import SelectionPolicy

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
            raise _validation(exc) from None

    async def plan(self, ctx, query: str, policy, param: str = "budget_fraction"):
        """The AttendPlan of a query (None when dense)."""
        if policy is None:
            return None
        from agentctx.kv_store.errors import StoreError

        ref = self.retrieval.plan.remote(ctx.context_id, ctx.tenant, query, policy)
        try:
            return await asyncio.wait_for(_await(ref), self.cfg.serve.request_timeout_s)
        except asyncio.TimeoutError:
            ray.cancel(ref)
            raise self.error(TimeoutError("retrieval did not answer in time")) from None
        except Exception as exc:
            inner = _unwrap(exc)
            if isinstance(inner, ValueError) and not isinstance(inner, StoreError):
                # e.g. a budget below the mandatory sink + recent pages
                raise APIError(422, str(inner), code="invalid_budget", param=param) from None
            raise self.error(inner) from None

    def check_max_tokens(self, value: int, param: str) -> int:
        limit = self.cfg.serve.max_new_tokens
        if value > limit:
            raise APIError(422, f"{param} must be <= {limit}", code="less_than_equal", param=param, limit=limit)
        return value

    # ------------------------------------------------------------------ generation
    def _retry_deadline(self) -> float:
        return time.monotonic() + min(REPLICA_RETRY_S, self.cfg.serve.request_timeout_s)

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """One generation; a dead replica is retried until a replacement answers (or 503)."""
        from agentctx.kv_store.errors import PagesMissingError

        deadline = time.monotonic() + self.cfg.serve.request_timeout_s
        retry_until, backoff, repaired = self._retry_deadline(), 0.2, False
        failed_over = False
        while True:
            try:
                return await self._model_call("generate", req, context_id=req.context_id,
                                              timeout_s=max(0.01, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise self._timeout_error(failed_over) from None
            except Exception as exc:
                inner = _unwrap(exc)
                if isinstance(inner, PagesMissingError) and not repaired:
                    repaired = True
                    await self.repair(req.context_id, req.tenant)
                    continue
                if _is_replica_failure(inner) and time.monotonic() + backoff < retry_until:
                    log.warning("model replica failed (%s); retrying in %.1f s", type(inner).__name__, backoff)
                    # After a replica death the client gets an answer or a clear error within
                    # the failover window, not after a full generation on the replacement.
                    failed_over, deadline = True, min(deadline, retry_until + FAILOVER_GRACE_S)
                    await asyncio.sleep(backoff)
                    backoff = min(2.0, backoff * 2)
                    continue
                raise self.error(inner) from None

    def _timeout_error(self, failed_over: bool) -> APIError:
        if failed_over:
            return APIError(503, "the model replica failed and its replacement did not finish in time; retry",
                            type="service_unavailable", code="replica_unavailable",
                            headers=_retry_headers(self.retry_after_s))
        return APIError(504, "the model did not answer in time", type="timeout", code="timeout",
                        headers=_retry_headers(self.retry_after_s))

    async def stream(self, req: GenerateRequest) -> AsyncIterator[tuple[str, Any]]:
        """``("delta", text)``... then ``("result", GenerateResult)``; retried while nothing was sent."""
        from agentctx.kv_store.errors import PagesMissingError

        deadline = time.monotonic() + self.cfg.serve.request_timeout_s
        retry_until, backoff, repaired = self._retry_deadline(), 0.2, False
        failed_over = False
        while True:
            gen = self.handle.options(stream=True, multiplexed_model_id=req.context_id).stream_events.remote(req)
            sent = False
            try:
                while True:
                    remaining = deadline - time.monotonic()
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
                raise self._timeout_error(failed_over) from None
            except Exception as exc:
                gen.cancel()
                inner = _unwrap(exc)
                if not sent and isinstance(inner, PagesMissingError) and not repaired:
                    repaired = True
                    await self.repair(req.context_id, req.tenant)
                    continue
                if not sent and _is_replica_failure(inner) and time.monotonic() + backoff < retry_until:
                    log.warning("model replica failed before streaming (%s); retrying", type(inner).__name__)
                    failed_over, deadline = True, min(deadline, retry_until + FAILOVER_GRACE_S)
                    await asyncio.sleep(backoff)
                    backoff = min(2.0, backoff * 2)
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


async def _await(resp):
    return await resp


# ============================================================================ background jobs
class JobManager:
    """Background work of the HTTP API, as one named detached Ray actor per namespace.

    Pipeline runs and long context loads run here in threads (at most
    ``max_running`` pipelines at a time, the rest queue), so any ingress replica
    can answer a status poll and a run outlives the request that started it.
    Job records are kept for the last ``max_jobs`` jobs.
    """

    def __init__(self, config: dict, model_handle, max_running: int = 2, max_jobs: int = 1000):
        from agentctx.serving.client import ServeReplicaClient

        self.cfg = AgentctxConfig.model_validate(config)
        self.client = ServeReplicaClient(model_handle, timeout_s=self.cfg.serve.request_timeout_s)
        self._jobs: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_running)
        self._max_jobs = max_jobs
        self._rt = None

    def ping(self) -> bool:
        return True

    def _runtime(self):
        with self._lock:
            if self._rt is None:
                from agentctx.runtime import RETRIEVAL_ACTOR

                retrieval = ray.get_actor(RETRIEVAL_ACTOR, namespace=self.cfg.store.namespace)
                self._rt = _make_runtime(self.cfg, self.client, retrieval)
            return self._rt

    @staticmethod
    def _public(job: dict) -> dict:
        return {k: v for k, v in job.items() if not k.startswith("_")}

    def submit(self, job: dict, payload: dict) -> dict:
        job = dict(job, status="queued", created_at=time.time(), started_at=None, finished_at=None,
                   result=None, error=None)
        with self._lock:
            self._jobs[job["id"]] = job
            while len(self._jobs) > self._max_jobs:
                old = next((k for k, j in self._jobs.items() if j["status"] in ("succeeded", "failed")), None)
                if old is None:
                    break
                del self._jobs[old]
        threading.Thread(target=self._run, args=(job["id"], payload), name=f"job-{job['id']}", daemon=True).start()
        return self._public(job)

    def get(self, job_id: str, tenant: str) -> dict | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return self._public(job) if job is not None and job["tenant"] == tenant else None

    def find_load(self, tenant: str, context_id: str) -> dict | None:
        with self._lock:
            for job in reversed(self._jobs.values()):
                if job["kind"] == "load" and job["tenant"] == tenant and job["context_id"] == context_id:
                    return self._public(job)
        return None

    def counts(self) -> dict:
        with self._lock:
            out: dict[str, int] = {}
            for j in self._jobs.values():
                out[j["status"]] = out.get(j["status"], 0) + 1
            return out

    def _set(self, job_id: str, **fields) -> None:
        with self._lock:
            if job_id in self._jobs:
                self._jobs[job_id].update(fields)

    def _run(self, job_id: str, payload: dict) -> None:
        job = self._jobs[job_id]
        slots = self._slots if job["kind"] == "pipeline" else None
        if slots is not None:
            slots.acquire()
        try:
            self._set(job_id, status="running", started_at=time.time())
            if job["kind"] == "pipeline":
                result = self._run_pipeline(job, payload)
            else:
                result = self._run_load(job, payload)
            self._set(job_id, status="succeeded", result=result, finished_at=time.time())
        except Exception as exc:
            inner = _unwrap(exc)
            log.warning("job %s failed: %s: %s", job_id, type(inner).__name__, inner)
            self._set(job_id, status="failed", error=f"{type(inner).__name__}: {inner}"[:2000],
                      finished_at=time.time())
        finally:
            if slots is not None:
                slots.release()

    def _run_load(self, job: dict, payload: dict) -> dict:
        rt = self._runtime()
        ctx, res = rt.load_context(payload["text"], job["tenant"])
        ctx.close()
        return {"num_tokens": res.num_tokens, "num_pages": res.num_pages, "prefilled": res.prefilled,
                "prefill_s": res.prefill_s, "index_s": res.index_s, "total_s": res.total_s}

    def _run_pipeline(self, job: dict, payload: dict) -> dict:
        from agentctx.pipelines.dsl import PipelineSpec
        from agentctx.pipelines.runner import PipelineRunner

        rt = self._runtime()
        spec = PipelineSpec.model_validate(payload["spec"])
        cid, tenant = job["context_id"], job["tenant"]
        result = PipelineRunner(rt, progress=False).run(spec, cid, tenant)
        if payload.get("report"):
            from agentctx.pipelines.report import build_report

            return build_report(result, rt.client.info()).model_dump(mode="json")
        return {"pipeline": result.pipeline, "context_id": cid, "seconds": round(result.seconds, 3),
                "steps": {n: {"outputs": s.outputs, "errors": s.errors, "attempts": s.attempts,
                              "seconds": round(s.seconds, 3), "stats": s.stats} for n, s in result.steps.items()}}


# ============================================================================ pipelines
def _pipeline_dirs() -> list[Path]:
    import agentctx.pipelines as pipelines

    dirs = [Path(pipelines.__file__).parent]
    extra = settings.env_str("PIPELINES_DIR")
    if extra:
        dirs.append(Path(extra))
    return dirs


def resolve_pipeline(name: str, body: PipelineRunRequest, cfg: AgentctxConfig) -> tuple[dict, bool]:
    """``(spec dict, is_review)`` for a pipeline name; 404 if unknown, 422 if its spec is invalid."""
    from agentctx.pipelines.dsl import PipelineSpec

    if name == "document_review":
        from agentctx.pipelines.document_review import review_pipeline

        if body.spec is not None:
            raise APIError(422, "document_review is built in; it takes options, not a spec", param="spec")
        opts = body.options
        kwargs: dict[str, Any] = {"max_concurrency": cfg.max_concurrent_agents}
        if opts is not None:
            kwargs.update(summarize=opts.summarize, dense=opts.dense)
            if opts.clause_kinds is not None:
                from agentctx.agents import check_clause_kinds

                try:
                    kwargs["clause_kinds"] = check_clause_kinds(opts.clause_kinds)
                except ValueError as exc:
                    raise APIError(422, str(exc), param="options.clause_kinds") from None
        return review_pipeline(**kwargs).model_dump(mode="json"), True
    if body.options is not None:
        raise APIError(422, "options apply to document_review only", param="options")
    data: Any = body.spec
    if data is None:
        for d in _pipeline_dirs():
            for suffix in (".yaml", ".yml"):
                path = d / f"{name}{suffix}"
                if path.is_file():
                    import yaml

                    data = yaml.safe_load(path.read_text())
                    break
            if data is not None:
                break
        if data is None:
            raise APIError(404, f"pipeline {name!r} not found", type="not_found", code="pipeline_not_found",
                           param="name")
    if not isinstance(data, dict):
        raise APIError(422, "pipeline spec must be a mapping", param="spec")
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise _validation(exc, "spec") from None
    if spec.name != name:
        raise APIError(422, f"spec name {spec.name!r} does not match the path name {name!r}", param="spec.name")
    return spec.model_dump(mode="json"), False


# ============================================================================ the app
class _Guard:
    """Outermost ASGI layer: request id, auth, Content-Length cap, metrics, and errors as JSON."""

    def __init__(self, app, svc: ApiService):
        self.app, self.svc = app, svc

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        svc = self.svc
        t0 = time.perf_counter()
        rid = uuid.uuid4().hex
        state = {"status": 0, "started": False}

        async def send_wrapped(message):
            if message["type"] == "http.response.start":
                state["started"], state["status"] = True, message["status"]
                message = dict(message, headers=list(message.get("headers", [])) + [(b"x-request-id", rid.encode())])
            await send(message)

        svc.metrics.in_flight.inc()
        try:
            headers = Headers(scope=scope)
            tenant = DEFAULT_TENANT
            if get_route_path(scope) not in OPEN_PATHS:
                tenant = svc.auth.tenant_for(headers.get("authorization"), headers.get("x-api-key"))
                if tenant is None:
                    err = APIError(401, "missing or invalid API key (send Authorization: Bearer KEY)",
                                   type="authentication_error", code="invalid_api_key",
                                   headers={"WWW-Authenticate": "Bearer"})
                    return await err.response()(scope, receive, send_wrapped)
                length = headers.get("content-length")
                limit = svc.cfg.serve.max_request_bytes
                if length is not None:
                    if not length.strip().isdigit():
                        err = APIError(400, "malformed Content-Length", code="invalid_header", param="content-length")
                        return await err.response()(scope, receive, send_wrapped)
                    if int(length) > limit:
                        err = APIError(413, f"request body over {limit} bytes", code="request_too_large",
                                       param="body", limit=limit)
                        return await err.response()(scope, receive, send_wrapped)
            scope.setdefault("state", {}).update(tenant=tenant, request_id=rid)
            await self.app(scope, receive, send_wrapped)
        except Exception as exc:
            err = svc.count(svc.error(exc))
            if not state["started"]:
                await err.response()(scope, receive, send_wrapped)
            else:
                log.warning("error after the response started (%s): %s", rid, exc)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            svc.metrics.observe_request(template, scope.get("method", "?"), state["status"] or 499,
                                        time.perf_counter() - t0)
            svc.metrics.in_flight.dec()


def _plan_out(plan, ctx_tokens: int) -> PlanOut:
    if plan is None:
        return PlanOut(pages=[], reasons=["all"], attended_tokens=ctx_tokens, context_tokens=ctx_tokens,
                       utilization=1.0, dense=True)
    return PlanOut(pages=list(plan.pages), reasons=list(plan.reasons), attended_tokens=plan.attended_tokens,
                   context_tokens=plan.context_tokens, utilization=round(plan.utilization, 6),
                   budget_tokens=plan.budget_tokens)


def _usage(res: GenerateResult) -> dict:
    return {"prompt_tokens": res.prompt_tokens, "completion_tokens": len(res.token_ids),
            "total_tokens": res.prompt_tokens + len(res.token_ids)}


def _ext(res: GenerateResult, context_id: str) -> dict:
    return {"context_id": context_id, "pages_attended": res.pages_attended, "attended_tokens": res.attended_tokens,
            "context_tokens": res.context_tokens,
            "utilization": round(res.attended_tokens / res.context_tokens, 6) if res.context_tokens else None,
            "ttft_s": round(res.ttft_s, 6), "total_s": round(res.total_s, 6)}


def render_chat(messages) -> tuple[str, str]:
    """(prompt continuing after the document, the last user turn for retrieval)."""
    lines, last_user = [], ""
    for m in messages:
        try:
            text = m.text()
        except ValueError as exc:
            raise APIError(400, str(exc), code="unsupported_content", param="messages") from None
        if m.role in ("system", "developer"):
            lines.append(text.strip())
        elif m.role == "user":
            lines.append(f"User: {text}")
            last_user = text
        elif m.role == "assistant":
            lines.append(f"Assistant: {text}")
        else:
            lines.append(f"Tool: {text}")
    prompt = "\n\n" + "\n".join(lines) + "\nAssistant:"
    if len(prompt) > MAX_PROMPT_CHARS:
        raise APIError(422, f"messages longer than {MAX_PROMPT_CHARS} characters in total", code="string_too_long",
                       param="messages", limit=MAX_PROMPT_CHARS)
    return prompt, last_user or text


def create_app(svc: ApiService) -> FastAPI:
    """The FastAPI app over one ApiService (what the Serve ingress serves)."""
    app = FastAPI(title="agentctx", version="0.1.0",
                  description="Many agents over one long document: shared paged KV, block-selected attention.")
    cfg = svc.cfg
    limit = cfg.serve.max_request_bytes

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError):
        return svc.count(exc).response()

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_request: Request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return APIError(422, f"{param}: {first.get('msg', 'invalid')}" if param else "invalid request",
                        code=first.get("type"), param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException):
        codes = {404: ("not_found", "not_found"), 405: ("invalid_request_error", "method_not_allowed")}
        typ, code = codes.get(exc.status_code, ("invalid_request_error", "http_error"))
        return APIError(exc.status_code, str(exc.detail), type=typ, code=code,
                        headers=getattr(exc, "headers", None)).response()

    def tenant_of(request: Request) -> str:
        return request.state.tenant

    # ------------------------------------------------------------------ health, metrics, models
    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        try:
            svc.metrics.replicas.update(await svc._model_call("info", timeout_s=2.0))
        except Exception as exc:  # metrics of the ingress itself are still worth a scrape
            log.debug("replica info for /metrics failed: %s", exc)
        body, ctype = svc.metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/v1/models")
    async def models():
        mid = await svc.model_id()
        return {"object": "list", "data": [{"id": mid, "object": "model", "created": svc.started_at,
                                            "owned_by": "agentctx"}]}

    async def check_model(name: str | None) -> str:
        mid = await svc.model_id()
        if name and name not in (mid, "agentctx", "default"):
            raise APIError(404, f"model {name!r} not found; see /v1/models", code="model_not_found", param="model")
        return mid

    # ------------------------------------------------------------------ contexts
    def context_body(cid: str, rec=None, res=None, status: str = "ready", error: str | None = None,
                     holders: int | None = None) -> dict:
        out = ContextResponse(id=cid, status=status, status_url=f"/v1/contexts/{cid}", holders=holders)
        if rec is not None:
            out.model, out.num_tokens, out.num_pages = rec.model_id, rec.num_tokens, len(rec.page_ids)
            out.page_size = (rec.extra or {}).get("page_size")
        if res is not None:
            out.num_tokens, out.num_pages, out.prefilled = res.num_tokens, res.num_pages, res.prefilled
            out.prefill_s, out.index_s, out.total_s = (round(res.prefill_s, 4), round(res.index_s, 4),
                                                       round(res.total_s, 4))
            out.page_size = cfg.model.page_size
            out.model = svc._model_id
        if error is not None:
            out.error = {"message": error, "type": "load_failed", "code": "load_failed"}
        return out.model_dump(exclude_none=True)

    @app.post("/v1/contexts")
    async def create_context(request: Request):
        tenant = tenant_of(request)
        ctype = request.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() == "multipart/form-data":
            parts = parse_multipart(await read_body(request, limit), ctype)
            part = parts.get("file") or next(((b, f) for b, f in parts.values() if f), None) or parts.get("text")
            if part is None:
                raise APIError(422, "multipart upload needs a 'file' part", code="missing", param="file")
            try:
                text = part[0].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise APIError(400, f"file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                               code="invalid_utf8", param="file") from None
            want_async = _bool_field(parts.get("async", (None,))[0], "async")
            param = "file"
        else:
            body = await read_json(request, CreateContextRequest, limit)
            text, want_async, param = body.text, body.async_, "text"
        if not text.strip():
            raise APIError(422, "document is empty", code="empty_input", param=param)
        if "\x00" in text:
            raise APIError(422, "document holds NUL characters; send plain text", code="invalid_text", param=param)
        if want_async or len(text) > ASYNC_LOAD_CHARS:
            from agentctx.runtime import context_id_for

            cid = context_id_for(await svc.model_id(), tenant, text)
            rt = await svc.call(svc.runtime)
            try:
                rec = await svc.call(rt.store.get_record, cid, tenant)
                return JSONResponse(context_body(cid, rec=rec), status_code=200)
            except Exception as exc:
                from agentctx.kv_store.errors import ContextNotFoundError

                if not isinstance(_unwrap(exc), ContextNotFoundError):
                    raise
            await _await(svc.jobs.submit.remote(
                {"id": f"load-{uuid.uuid4().hex}", "kind": "load", "tenant": tenant, "context_id": cid},
                {"text": text}))
            return JSONResponse(context_body(cid, status="loading"), status_code=202,
                                headers={"Location": f"/v1/contexts/{cid}"})
        try:
            res = await svc.load(text, tenant)
        except APIError:
            raise
        except Exception as exc:
            err = svc.error(exc)
            if err.code == "context_too_long":
                err.param, err.limit = param, cfg.model.max_context_tokens
            raise err from None
        return JSONResponse(context_body(res.context_id, res=res), status_code=201 if res.prefilled else 200)

    @app.get("/v1/contexts")
    async def list_contexts(request: Request):
        rt = await svc.call(svc.runtime)
        ids = await svc.call(rt.store.list_contexts, tenant_of(request))
        return {"object": "list", "data": [{"id": c, "object": "context"} for c in ids]}

    @app.get("/v1/contexts/{context_id}")
    async def get_context(context_id: str, request: Request):
        from agentctx.kv_store.errors import ContextNotFoundError

        tenant = tenant_of(request)
        _check_id(context_id, CONTEXT_ID_RE, "context_id")
        rt = await svc.call(svc.runtime)
        try:
            rec = await svc.call(rt.store.get_record, context_id, tenant)
            holders = await svc.call(rt.store.holders, context_id)
            return context_body(context_id, rec=rec, holders=len(holders))
        except ContextNotFoundError:
            job = await _await(svc.jobs.find_load.remote(tenant, context_id))
            if job is None or job["status"] == "succeeded":
                raise
            status = "failed" if job["status"] == "failed" else "loading"
            return context_body(context_id, status=status, error=job.get("error"))

    @app.delete("/v1/contexts/{context_id}")
    async def delete_context(context_id: str, request: Request):
        tenant = tenant_of(request)
        _check_id(context_id, CONTEXT_ID_RE, "context_id")
        rt = await svc.call(svc.runtime)
        await svc.call(rt.delete_context, context_id, tenant)
        for t, c in list(svc._empty.items()):
            if c == context_id:
                svc._empty.pop(t, None)
        try:  # free the device copy on the replica that holds it (others evict it by LRU)
            await svc._model_call("drop_context", context_id, context_id=context_id, timeout_s=5.0)
        except Exception as exc:
            log.debug("drop_context on a replica failed: %s", exc)
        return {"id": context_id, "object": "context", "deleted": True}

    @app.post("/v1/contexts/{context_id}/query")
    async def query(context_id: str, request: Request):
        tenant = tenant_of(request)
        _check_id(context_id, CONTEXT_ID_RE, "context_id")
        body: QueryRequest = await read_json(request, QueryRequest, limit)
        svc.check_max_tokens(body.max_new_tokens, "max_new_tokens")
        policy = svc.policy_for(body.dense, body.budget_fraction, body.top_k_pages)
        ctx = await svc.attach(context_id, tenant)
        handed_off = False
        try:
            plan = await svc.plan(ctx, body.question, policy)
            stop = tuple(body.stop) if body.stop is not None else _QA_STOP
            req = GenerateRequest(context_id, f"\n\nQuestion: {body.question}\nAnswer:",
                                  None if plan is None else tuple(plan.pages), body.max_new_tokens,
                                  body.temperature, stop, body.seed, tenant=tenant,
                                  request_id=request.state.request_id)
            plan_out = _plan_out(plan, ctx.info.num_tokens)
            if body.stream:
                handed_off = True
                return StreamingResponse(query_events(ctx, req, plan_out, body.question),
                                         media_type="text/event-stream", headers=_SSE_HEADERS)
            res = await svc.generate(req)
        finally:
            if not handed_off:
                svc.close_later(ctx)
        svc.metrics.observe_generation("query", res)
        return QueryResponse(context_id=context_id, question=body.question, answer=res.text.strip(), plan=plan_out,
                             pages_attended=res.pages_attended, attended_tokens=res.attended_tokens,
                             context_tokens=res.context_tokens,
                             utilization=round(res.attended_tokens / res.context_tokens, 6) if res.context_tokens
                             else 0.0, finish_reason=res.finish_reason, ttft_s=round(res.ttft_s, 6),
                             total_s=round(res.total_s, 6), usage=_usage(res)).model_dump()

    async def query_events(ctx, req: GenerateRequest, plan_out: PlanOut, question: str):
        try:
            yield sse(plan_out.model_dump(), "plan")
            async for kind, value in svc.stream(req):
                if kind == "delta":
                    yield sse({"text": value}, "delta")
                else:
                    svc.metrics.observe_generation("query", value)
                    yield sse({"context_id": req.context_id, "question": question, "answer": value.text.strip(),
                               "finish_reason": value.finish_reason, "usage": _usage(value),
                               **{k: v for k, v in _ext(value, req.context_id).items() if k != "context_id"}},
                              "done")
        except Exception as exc:
            yield sse(svc.count(svc.error(exc)).body(), "error")
        finally:
            svc.close_later(ctx)

    # ------------------------------------------------------------------ pipelines
    @app.post("/v1/pipelines/{name}/runs")
    async def start_run(name: str, request: Request):
        tenant = tenant_of(request)
        if not PIPELINE_NAME_RE.match(name):
            raise APIError(404, f"pipeline {name[:64]!r} not found", type="not_found", code="pipeline_not_found",
                           param="name")
        body: PipelineRunRequest = await read_json(request, PipelineRunRequest, limit)
        _check_id(body.context_id, CONTEXT_ID_RE, "context_id")
        spec, is_review = resolve_pipeline(name, body, cfg)
        rt = await svc.call(svc.runtime)
        await svc.call(rt.store.get_record, body.context_id, tenant)  # 404 unless the tenant's own
        run_id = f"run-{uuid.uuid4().hex}"
        job = await _await(svc.jobs.submit.remote(
            {"id": run_id, "kind": "pipeline", "tenant": tenant, "pipeline": name, "context_id": body.context_id},
            {"spec": spec, "report": is_review}))
        url = f"/v1/pipelines/{name}/runs/{run_id}"
        out = PipelineRunResponse(id=run_id, pipeline=name, context_id=body.context_id, status=job["status"],
                                  created_at=job["created_at"], status_url=url)
        return JSONResponse(out.model_dump(exclude_none=True), status_code=202, headers={"Location": url})

    @app.get("/v1/pipelines/{name}/runs/{run_id}")
    async def get_run(name: str, run_id: str, request: Request):
        tenant = tenant_of(request)
        if not RUN_ID_RE.match(run_id) or not PIPELINE_NAME_RE.match(name):
            raise APIError(404, "run not found", type="not_found", code="run_not_found", param="run_id")
        job = await _await(svc.jobs.get.remote(run_id, tenant))
        if job is None or job.get("pipeline") != name:
            raise APIError(404, f"run {run_id!r} not found", type="not_found", code="run_not_found", param="run_id")
        out = PipelineRunResponse(id=run_id, pipeline=name, context_id=job["context_id"], status=job["status"],
                                  created_at=job["created_at"], started_at=job["started_at"],
                                  finished_at=job["finished_at"], status_url=f"/v1/pipelines/{name}/runs/{run_id}",
                                  result=job["result"], error=job["error"])
        return out.model_dump()

    # ------------------------------------------------------------------ OpenAI
    async def openai_context(body, tenant: str):
        if body.context_id is not None:
            _check_id(body.context_id, CONTEXT_ID_RE, "context_id")
            cid = body.context_id
        else:
            cid = await svc.empty_context(tenant)
        try:
            return await svc.attach(cid, tenant)
        except Exception as exc:
            from agentctx.kv_store.errors import ContextNotFoundError

            if body.context_id is None and isinstance(_unwrap(exc), ContextNotFoundError):
                svc._empty.pop(tenant, None)  # deleted behind our back: make it again
                return await svc.attach(await svc.empty_context(tenant), tenant)
            raise

    def openai_checks(body) -> None:
        if body.n not in (None, 1):
            raise APIError(400, "only n=1 is supported", code="unsupported_parameter", param="n")
        if body.logprobs not in (None, False, 0):
            raise APIError(400, "logprobs are not supported", code="unsupported_parameter", param="logprobs")

    async def openai_generate(request: Request, body, prompt: str, query_text: str, max_tokens: int,
                              param: str, chat: bool):
        tenant = tenant_of(request)
        model = await check_model(body.model)
        svc.check_max_tokens(max_tokens, param)
        policy = svc.policy_for(body.dense, body.budget_fraction, None)
        ctx = await openai_context(body, tenant)
        handed_off = False
        try:
            plan = None
            if policy is not None and ctx.info.num_pages > 1:
                plan = await svc.plan(ctx, query_text[-4000:] or prompt[-4000:], policy)
            stop = tuple(body.stop) if body.stop is not None else (_CHAT_STOP if chat else ())
            temperature = 1.0 if body.temperature is None else body.temperature
            seed = None if body.seed is None else abs(body.seed)
            req = GenerateRequest(ctx.context_id, prompt, None if plan is None else tuple(plan.pages), max_tokens,
                                  temperature, stop, seed, tenant=tenant, request_id=request.state.request_id)
            oid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
            created = int(time.time())
            if body.stream:
                include_usage = bool((body.stream_options or {}).get("include_usage"))
                handed_off = True
                return StreamingResponse(openai_events(ctx, req, oid, created, model, chat, include_usage,
                                                       prompt if getattr(body, "echo", False) else ""),
                                         media_type="text/event-stream", headers=_SSE_HEADERS)
            res = await svc.generate(req)
        finally:
            if not handed_off:
                svc.close_later(ctx)
        route = "chat" if chat else "completions"
        svc.metrics.observe_generation(route, res)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": res.text},
                      "logprobs": None, "finish_reason": res.finish_reason}
            obj = "chat.completion"
        else:
            text = (prompt + res.text) if getattr(body, "echo", False) else res.text
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": res.finish_reason}
            obj = "text_completion"
        return {"id": oid, "object": obj, "created": created, "model": model, "choices": [choice],
                "usage": _usage(res), "agentctx": _ext(res, ctx.context_id)}

    async def openai_events(ctx, req, oid, created, model, chat, include_usage, echo: str):
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta: str | None, finish: str | None, role: bool = False) -> bytes:
            if chat:
                d: dict = {"role": "assistant", "content": ""} if role else ({} if delta is None else
                                                                             {"content": delta})
                choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
            out = {"id": oid, "object": obj, "created": created, "model": model, "choices": [choice]}
            if include_usage:
                out["usage"] = None
            return sse(out)

        try:
            if chat:
                yield chunk(None, None, role=True)
            elif echo:
                yield chunk(echo, None)
            async for kind, value in svc.stream(req):
                if kind == "delta":
                    yield chunk(value, None)
                else:
                    svc.metrics.observe_generation("chat" if chat else "completions", value)
                    yield chunk(None, value.finish_reason)
                    if include_usage:
                        yield sse({"id": oid, "object": obj, "created": created, "model": model, "choices": [],
                                   "usage": _usage(value)})
            yield b"data: [DONE]\n\n"
        except Exception as exc:
            yield sse(svc.count(svc.error(exc)).body())
        finally:
            svc.close_later(ctx)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body: CompletionRequest = await read_json(request, CompletionRequest, limit)
        openai_checks(body)
        if body.suffix:
            raise APIError(400, "suffix is not supported", code="unsupported_parameter", param="suffix")
        if body.best_of not in (None, 1):
            raise APIError(400, "only best_of=1 is supported", code="unsupported_parameter", param="best_of")
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        return await openai_generate(request, body, body.prompt, body.prompt, max_tokens, "max_tokens", chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body: ChatCompletionRequest = await read_json(request, ChatCompletionRequest, limit)
        openai_checks(body)
        prompt, last_user = render_chat(body.messages)
        if body.max_completion_tokens is not None:
            max_tokens, param = body.max_completion_tokens, "max_completion_tokens"
        elif body.max_tokens is not None:
            max_tokens, param = body.max_tokens, "max_tokens"
        else:
            max_tokens, param = min(256, cfg.serve.max_new_tokens), "max_tokens"
        return await openai_generate(request, body, prompt, last_user, max_tokens, param, chat=True)

    # Inside Starlette's ServerErrorMiddleware, outside routing: sees every exception first.
    app.add_middleware(_Guard, svc=svc)
    return app


# ============================================================================ Serve deployment
@serve.deployment(name="HttpIngress")
@serve.ingress()
class HttpIngress:
    """Serve ingress replica: one ApiService; its FastAPI app is built after the constructor."""

    def __init__(self, config: dict, model=None):
        self.svc = ApiService(AgentctxConfig.model_validate(config), model)

    def __serve_build_asgi_app__(self):
        return create_app(self.svc)

    def check_health(self) -> None:
        if self.svc.pool._shutdown:  # noqa: SLF001
            raise RuntimeError("ingress thread pool is shut down")


def ingress_options(cfg: AgentctxConfig) -> dict:
    s = cfg.serve
    opts: dict[str, Any] = {"num_replicas": 1, "max_ongoing_requests": INGRESS_MAX_ONGOING,
                            "ray_actor_options": {"num_cpus": 0}}
    if s.max_queued_requests >= 0:
        opts["max_queued_requests"] = max(s.max_queued_requests, INGRESS_MAX_ONGOING)
        opts["backpressure_config"] = {"status_code": 503, "retry_after_s": s.retry_after_s}
    return opts


def ingress_app(cfg: AgentctxConfig, model=None):
    """The ingress application; ``model`` is a bound model deployment (one app) or None (the
    ``agentctx-model`` app that ``Runtime.start`` deployed)."""
    return HttpIngress.options(**ingress_options(cfg)).bind(cfg.model_dump(), model)


def _config_from_args(args: dict | None) -> AgentctxConfig:
    args = dict(args or {})
    unknown = set(args) - {"config", "agentctx"}
    if unknown:
        raise ValueError(f"app_builder: unknown args {sorted(unknown)}; use 'config' (a path) or 'agentctx' (a mapping)")
    if "agentctx" in args:
        return AgentctxConfig.model_validate(args["agentctx"] or {})
    path = args.get("config") or settings.env_str("CONFIG")
    return load_config(path)


def app_builder(args: dict) -> Any:
    """``serve run agentctx.entrypoints.http.app:app_builder config=deploy/agentctx.yaml`` (or the ``args`` of a Serve
    config): one application holding the model deployment and the HTTP ingress."""
    cfg = _config_from_args(args)
    ApiKeyAuth(cfg.serve.api_keys)  # fail the deploy now if an "env:" key is missing
    return ingress_app(cfg, replica_app(cfg.replica_config()))


def start_http(cfg: AgentctxConfig, *, num_cpus: int | None = None):
    """Start (or join) Ray, Serve on ``cfg.serve.host:port``, the runtime and the ingress.

    Returns ``(runtime, url)``. Used by ``serve_forever`` and by tests; undo with ``stop_http``.
    """
    import os

    from agentctx.runtime import Runtime

    ApiKeyAuth(cfg.serve.api_keys)  # a missing "env:" key fails here, not in a replica restart loop
    owns_ray = False
    if not ray.is_initialized():
        address = settings.ray_address()
        if address:
            ray.init(address=address, namespace=cfg.store.namespace, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count(), namespace=cfg.store.namespace, include_dashboard=False,
                     log_to_driver=False)
            owns_ray = True
    serve.start(http_options={"host": cfg.serve.host, "port": cfg.serve.port})
    rt = Runtime.start(cfg)
    rt._owns_ray = owns_ray  # noqa: SLF001  (stop_http shuts down what start_http started)
    serve.run(ingress_app(cfg), name=HTTP_APP, route_prefix="/")
    host = "127.0.0.1" if cfg.serve.host in ("0.0.0.0", "::") else cfg.serve.host
    return rt, f"http://{host}:{cfg.serve.port}"


def stop_http(rt, *, shutdown_serve: bool = True) -> None:
    """Delete the ingress, stop the background-jobs actor, and shut Serve (and an owned Ray) down."""
    try:
        serve.delete(HTTP_APP)
    except Exception as exc:
        log.debug("serve.delete(%s): %s", HTTP_APP, exc)
    try:
        ray.kill(ray.get_actor(JOBS_ACTOR, namespace=rt.config.store.namespace), no_restart=True)
    except Exception:
        pass
    if shutdown_serve:
        try:
            serve.shutdown()
        except Exception as exc:
            log.debug("serve.shutdown: %s", exc)
    if rt._owns_ray:  # noqa: SLF001
        ray.shutdown()


def serve_forever(cfg: AgentctxConfig) -> None:
    """``agentctx serve``: start everything, print the URL, block until Ctrl-C / SIGTERM, clean up."""
    stop = threading.Event()

    def _stop(signum, _frame):
        log.info("signal %d: shutting down", signum)
        stop.set()

    rt, url = start_http(cfg)
    old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    auth = "API keys required" if cfg.serve.api_keys else "auth OFF (no serve.api_keys)"
    print(f"agentctx serving on {url}  ({auth}; OpenAI base_url {url}/v1; Ctrl-C to stop)", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        stop_http(rt)
