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
``GET    /v1/pipelines/{name}/runs``  the tenant's runs of a pipeline, newest first
``GET    /v1/pipelines/{name}/runs/{run_id}``  status and, when done, the result
``DELETE /v1/pipelines/{name}/runs/{run_id}``  cancel a queued or running run
``POST   /v1/completions``            OpenAI legacy completions (+ ``context_id`` extension)
``POST   /v1/chat/completions``       OpenAI chat completions (+ ``context_id`` extension)
``GET    /v1/models``                 the served model (``/v1/models/{id}``: one)
``GET    /metrics``                   Prometheus text
``GET    /healthz``                   liveness, no auth
``GET    /readyz``                    readiness (store and model replicas answer), no auth
====================================  ===========================================================

OpenAI routes without ``context_id`` answer over a tiny built-in document,
``"(no document)"``, created once per tenant: the model has no document to read,
but plain OpenAI clients work unchanged. ``stream: true`` gives OpenAI chunks
and ``data: [DONE]``.

Errors are JSON ``{"error": {"message", "type", "code", "param", "limit"}}``:
400 malformed body (bad JSON, invalid UTF-8, lone surrogates) or unsupported
parameter, 401 missing/unknown key, 404 unknown id or route, 413 body over
``serve.max_request_bytes`` or document over ``model.max_context_tokens``, 415
wrong content type, 409 a context that lost its KV and whose text is not kept
(``context_lost``: upload the same text again), 422 a field out of range (``param`` + ``limit``), 503 +
``Retry-After`` when the model queue is full (Serve ``max_queued_requests``
exceeded: ``BackPressureError``), the KV store is unreachable
(``StoreUnavailableError``) or no model replica answers within 25 s, 504 past
``serve.request_timeout_s``. A replica that dies mid-request is retried on
another (or its restarted self) while no output has been sent; a stream that
already sent text ends with an ``error`` event instead.

Start it with ``agentctx serve --config deploy/agentctx.yaml`` (``server.serve_forever``)
or ``serve run deploy/serve.yaml`` (``app_builder``). The pieces: errors.py, body.py,
service.py (ApiService), jobs.py (background work), guard.py (the ASGI guard), routes/
(one router per area), server.py (start and stop).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentctx.common import settings
from agentctx.config import AgentctxConfig, load_config
from agentctx.entrypoints.auth import ApiKeyAuth
from agentctx.entrypoints.http.errors import APIError
from agentctx.entrypoints.http.guard import Guard
from agentctx.entrypoints.http.routes import contexts, openai, ops, pipelines, queries
from agentctx.entrypoints.http.service import ApiService
from agentctx.serving.serve.deployments import replica_app

__all__ = ["create_app", "HttpIngress", "ingress_app", "ingress_options", "app_builder", "HTTP_APP"]

HTTP_APP = "agentctx-http"
INGRESS_MAX_ONGOING = 256        # requests one ingress replica serves at once (it only awaits)


def create_app(svc: ApiService) -> FastAPI:
    """The FastAPI app over one ApiService (what the Serve ingress serves)."""
    app = FastAPI(title="agentctx", version="0.1.0",
                  description="Many agents over one long document: shared paged KV, block-selected attention.")
    app.state.svc = svc
    for area in (ops, contexts, queries, pipelines, openai):
        app.include_router(area.router)

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

    # Inside Starlette's ServerErrorMiddleware, outside routing: sees every exception first.
    app.add_middleware(Guard, svc=svc)
    return app


@serve.deployment(name="HttpIngress")
@serve.ingress()
class HttpIngress:
    """Serve ingress replica: one ApiService; its FastAPI app is built after the constructor."""

    def __init__(self, config: AgentctxConfig, model=None):
        self.svc = ApiService(config, model)

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
    return HttpIngress.options(**ingress_options(cfg)).bind(cfg, model)


def _config_from_args(args: dict | None) -> AgentctxConfig:
    args = dict(args or {})
    unknown = set(args) - {"config", "agentctx"}
    if unknown:
        raise ValueError(f"app_builder: unknown args {sorted(unknown)}; use 'config' (a path) or 'agentctx' "
                         "(a mapping)")
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
