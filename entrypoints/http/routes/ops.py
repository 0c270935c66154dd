"""Operations: ``/healthz`` (liveness, no auth) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentctx.entrypoints.http.service import service_of

__all__ = ["router"]

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/metrics")
async def metrics(request: Request):
    svc = service_of(request)
    try:
        svc.metrics.replicas.update(await svc.model_call("info", timeout_s=2.0))
    except Exception as exc:  # metrics of the ingress itself are still worth a scrape
        log.debug("replica info for /metrics failed: %s", exc)
    body, ctype = svc.metrics.render()
    return Response(body, media_type=ctype)
