"""``/v1/pipelines/{name}/runs``: run ``document_review``, a ``pipelines/<name>.yaml`` (or
``$AGENTCTX_PIPELINES_DIR/<name>.yaml``) or an inline ``spec`` in the background (202 +
``status_url``), then poll the run; ``GET`` lists the tenant's runs of a pipeline (newest first,
without results) and ``DELETE .../runs/{id}`` cancels a queued or running run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse

import agentctx.pipelines
from agentctx.agents import check_clause_kinds
from agentctx.common import settings
from agentctx.config import AgentctxConfig
from agentctx.entrypoints.http.body import check_id, read_json
from agentctx.entrypoints.http.errors import APIError, validation_error
from agentctx.entrypoints.http.jobs import Job, PipelinePayload
from agentctx.entrypoints.http.service import service_of, tenant_of, wait
from agentctx.entrypoints.schemas import (
    CONTEXT_ID_RE,
    PIPELINE_NAME_RE,
    RUN_ID_RE,
    PipelineRunRequest,
    PipelineRunResponse,
)
from agentctx.pipelines.document_review import review_pipeline
from agentctx.pipelines.dsl import PipelineSpec

__all__ = ["router", "resolve_pipeline"]

router = APIRouter()


def _pipeline_dirs() -> list[Path]:
    dirs = [Path(agentctx.pipelines.__file__).parent]
    extra = settings.env_str("PIPELINES_DIR")
    if extra:
        dirs.append(Path(extra))
    return dirs


def _review(body: PipelineRunRequest, cfg: AgentctxConfig) -> PipelineSpec:
    return review_pipeline(**review_options(body, cfg))


def review_options(body: PipelineRunRequest, cfg: AgentctxConfig) -> dict[str, Any]:
    """review_pipeline's keyword arguments from a run request's options (422 on bad ones)."""
    if body.spec is not None:
        raise APIError(422, "document_review is built in; it takes options, not a spec", param="spec")
    opts = body.options
    kwargs: dict[str, Any] = {"max_concurrency": cfg.max_concurrent_agents}
    if opts is not None:
        kwargs.update(summarize=opts.summarize, dense=opts.dense)
        if opts.clause_kinds is not None:
            try:
                kwargs["clause_kinds"] = check_clause_kinds(opts.clause_kinds)
            except ValueError as exc:
                raise APIError(422, str(exc), param="options.clause_kinds") from None
    return kwargs


def _find_spec(name: str) -> Any:
    """The first non-empty ``<name>.yaml`` (or ``.yml``) of the pipeline dirs."""
    for d in _pipeline_dirs():
        path = next((d / f"{name}{s}" for s in (".yaml", ".yml") if (d / f"{name}{s}").is_file()), None)
        data = None if path is None else yaml.safe_load(path.read_text())
        if data is not None:
            return data
    raise APIError(404, f"pipeline {name!r} not found", type="not_found", code="pipeline_not_found", param="name")


def resolve_pipeline(name: str, body: PipelineRunRequest, cfg: AgentctxConfig) -> tuple[PipelineSpec, bool]:
    """``(spec, is_review)`` for a pipeline name; 404 if unknown, 422 if its spec is invalid."""
    if name == "document_review":
        return _review(body, cfg), True
    if body.options is not None:
        raise APIError(422, "options apply to document_review only", param="options")
    data: Any = body.spec if body.spec is not None else _find_spec(name)
    if not isinstance(data, dict):
        raise APIError(422, "pipeline spec must be a mapping", param="spec")
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, "spec") from None
    if spec.name != name:
        raise APIError(422, f"spec name {spec.name!r} does not match the path name {name!r}", param="spec.name")
    return spec, False


@router.post("/v1/pipelines/{name}/runs")
async def start_run(name: str, request: Request):
    svc, tenant = service_of(request), tenant_of(request)
    if not PIPELINE_NAME_RE.match(name):
        raise APIError(404, f"pipeline {name[:64]!r} not found", type="not_found", code="pipeline_not_found",
                       param="name")
    body: PipelineRunRequest = await read_json(request, PipelineRunRequest, svc.body_limit)
    check_id(body.context_id, CONTEXT_ID_RE, "context_id")
    await svc.check_user_context(body.context_id, tenant)
    spec, is_review = resolve_pipeline(name, body, svc.cfg)
    rt = await svc.call(svc.runtime)
    await svc.call(rt.store.get_record, body.context_id, tenant)  # 404 unless the tenant's own
    # A context that lost pages or its document is restored here (503 context_restoring while a long
    # restore runs), not in the jobs actor, where a second restore of it could run beside a query's.
    await svc.repair_if_broken(body.context_id, tenant)
    run_id = f"run-{uuid.uuid4().hex}"
    job = Job(id=run_id, kind="pipeline", tenant=tenant, pipeline=name, context_id=body.context_id)
    review = review_options(body, svc.cfg) if is_review else None
    job = await wait(svc.jobs.submit.remote(job, PipelinePayload(spec, report=is_review, review=review)))
    url = f"/v1/pipelines/{name}/runs/{run_id}"
    out = PipelineRunResponse(id=run_id, pipeline=name, context_id=body.context_id, status=job.status,
                              created_at=job.created_at, status_url=url)
    return JSONResponse(out.model_dump(exclude_none=True), status_code=202, headers={"Location": url})


def _run_body(job: Job) -> dict:
    return PipelineRunResponse(id=job.id, pipeline=job.pipeline or "", context_id=job.context_id, status=job.status,
                               created_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
                               status_url=f"/v1/pipelines/{job.pipeline}/runs/{job.id}", result=job.result,
                               error=job.error).model_dump()


def _not_found(run_id: str) -> APIError:
    return APIError(404, f"run {run_id[:64]!r} not found", type="not_found", code="run_not_found", param="run_id")


@router.get("/v1/pipelines/{name}/runs")
async def list_runs(name: str, request: Request, limit: int = 100):
    svc, tenant = service_of(request), tenant_of(request)
    if not PIPELINE_NAME_RE.match(name):
        raise APIError(404, f"pipeline {name[:64]!r} not found", type="not_found", code="pipeline_not_found",
                       param="name")
    if not 1 <= limit <= 1000:
        raise APIError(422, "limit must be in [1, 1000]", code="out_of_range", param="limit", limit=1000)
    jobs: list[Job] = await wait(svc.jobs.list.remote(tenant, "pipeline", name, limit))
    return {"object": "list", "data": [_run_body(j) for j in jobs]}


async def _find_run(svc, tenant: str, name: str, run_id: str) -> Job:
    """The tenant's run ``run_id`` of pipeline ``name``, or 404 (also for a malformed name or id)."""
    if not RUN_ID_RE.match(run_id) or not PIPELINE_NAME_RE.match(name):
        raise _not_found(run_id)
    job: Job | None = await wait(svc.jobs.get.remote(run_id, tenant))
    if job is None or job.pipeline != name:
        raise _not_found(run_id)
    return job


@router.get("/v1/pipelines/{name}/runs/{run_id}")
async def get_run(name: str, run_id: str, request: Request):
    job = await _find_run(service_of(request), tenant_of(request), name, run_id)
    return _run_body(job)


@router.delete("/v1/pipelines/{name}/runs/{run_id}")
async def cancel_run(name: str, run_id: str, request: Request):
    """Cancel a queued or running run (its agents stop, its reference is released); a finished run
    is answered as it is. Poll the run until ``status`` is ``cancelled``."""
    svc, tenant = service_of(request), tenant_of(request)
    await _find_run(svc, tenant, name, run_id)
    job = await wait(svc.jobs.cancel.remote(run_id, tenant))
    if job is None:
        raise _not_found(run_id)
    return JSONResponse(_run_body(job), status_code=202 if job.status in ("queued", "running") else 200)
