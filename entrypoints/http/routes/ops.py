"""Operations: ``/healthz`` (liveness), ``/readyz`` (readiness), both without auth, and ``/metrics``
(Prometheus text).

``/healthz`` answers 200 while the ingress process serves HTTP, whatever its dependencies do
(restarting the pod would not bring Redis back). ``/readyz`` answers 200 only when the KV store
(Redis and the store actor) and a model replica answer within 2 s each, else 503 + Retry-After
naming what failed: a load balancer then stops sending traffic that would only get 503s."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from agentctx.entrypoints.http.errors import retry_headers
from agentctx.entrypoints.http.service import service_of

READY_TIMEOUT_S = 2.0

__all__ = ["router"]

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


async def _store_ready(svc) -> None:
    rt = await asyncio.wait_for(svc.call(svc.runtime), READY_TIMEOUT_S)
    await asyncio.wait_for(svc.call(rt.store.ping, READY_TIMEOUT_S), READY_TIMEOUT_S + 0.5)


@router.get("/readyz")
async def readyz(request: Request):
    svc = service_of(request)
    checks: dict[str, str] = {}
    for name, probe in (("store", _store_ready(svc)),
                        ("model", svc.model_call(svc.client.ainfo(), timeout_s=READY_TIMEOUT_S))):
        try:
            await probe
            checks[name] = "ok"
        except Exception as exc:
            log.info("readiness: %s not ready (%s)", name, type(exc).__name__)
            checks[name] = "unavailable"
    if all(v == "ok" for v in checks.values()):
        return {"status": "ready", "checks": checks}
    return JSONResponse({"status": "not_ready", "checks": checks}, status_code=503,
                        headers=retry_headers(svc.retry_after_s))


@router.get("/metrics")
async def metrics(request: Request):
    svc = service_of(request)
    try:
        svc.metrics.replicas.update(await svc.model_call(svc.client.ainfo(), timeout_s=2.0))
    except Exception as exc:  # metrics of the ingress itself are still worth a scrape
        log.debug("replica info for /metrics failed: %s", exc)
    try:
        rt = await asyncio.wait_for(svc.call(svc.runtime), 2.0)
        svc.metrics.store.update(await asyncio.wait_for(svc.call(rt.store.metrics), 5.0))
    except Exception as exc:
        log.debug("store metrics for /metrics failed: %s", exc)
    try:
        svc.metrics.set_pipeline_runs(await asyncio.wait_for(svc.jobs.counts.remote("pipeline"), 2.0))
    except Exception as exc:
        log.debug("pipeline run counts for /metrics failed: %s", exc)
    body, ctype = svc.metrics.render()
    return Response(body, media_type=ctype)
