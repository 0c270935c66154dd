"""``/v1/contexts``: upload (JSON or multipart; large or ``async`` uploads load in the background),
list, status, delete."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from agentctx.entrypoints.http.body import bool_field, check_id, parse_multipart, read_body, read_json
from agentctx.entrypoints.http.errors import APIError, unwrap
from agentctx.entrypoints.http.jobs import Job, LoadPayload
from agentctx.entrypoints.http.service import ApiService, service_of, tenant_of, wait
from agentctx.entrypoints.schemas import CONTEXT_ID_RE, ContextResponse, CreateContextRequest
from agentctx.kv_store.doc_blob import DOC_BLOB
from agentctx.kv_store.errors import ContextNotFoundError
from agentctx.runtime import context_id_for

__all__ = ["router", "ASYNC_LOAD_CHARS"]

log = logging.getLogger(__name__)
router = APIRouter()

ASYNC_LOAD_CHARS = 200_000  # larger uploads always load in the background (202)


def context_body(svc: ApiService, cid: str, rec=None, res=None, status: str = "ready", error: str | None = None,
                 holders: int | None = None, progress: dict | None = None) -> dict:
    out = ContextResponse(id=cid, status=status, status_url=f"/v1/contexts/{cid}", holders=holders,
                          progress=progress)
    if rec is not None:
        out.model, out.num_tokens, out.num_pages = rec.model_id, rec.num_tokens, len(rec.page_ids)
        out.page_size = (rec.extra or {}).get("page_size")
    if res is not None:
        out.num_tokens, out.num_pages, out.prefilled = res.num_tokens, res.num_pages, res.prefilled
        out.prefill_s, out.index_s, out.total_s = (round(res.prefill_s, 4), round(res.index_s, 4),
                                                   round(res.total_s, 4))
        out.page_size = svc.cfg.model.page_size
        out.model = svc.known_model_id
    if error is not None:
        out.error = {"message": error, "type": "load_failed", "code": "load_failed"}
    return out.model_dump(exclude_none=True)


def _whole(store, rec) -> bool:
    """Every page and the document blob of a stored context are readable now."""
    return all(store.has_pages(rec.page_ids)) and not store.missing_blobs(rec.context_id, [DOC_BLOB])


async def _upload(request: Request, limit: int) -> tuple[str, bool, str]:
    """(text, load in the background, the field named in errors) of an upload."""
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
        return text, bool_field(parts.get("async", (None,))[0], "async"), "file"
    body = await read_json(request, CreateContextRequest, limit)
    return body.text, body.async_, "text"


@router.post("/v1/contexts")
async def create_context(request: Request):
    svc, tenant = service_of(request), tenant_of(request)
    text, want_async, param = await _upload(request, svc.body_limit)
    if not text.strip():
        raise APIError(422, "document is empty", code="empty_input", param=param)
    if "\x00" in text:
        raise APIError(422, "document holds NUL characters; send plain text", code="invalid_text", param=param)
    await svc.check_document_bytes(len(text.encode("utf-8", "surrogatepass")), param)
    if want_async or len(text) > ASYNC_LOAD_CHARS:
        cid = context_id_for(await svc.model_id(), tenant, text)
        rt = await svc.call(svc.runtime)
        try:
            rec = await svc.call(rt.store.get_record, cid, tenant)
            # Loaded and whole: nothing to do. Loaded but missing pages or blobs (a restart): the
            # load job below rebuilds it from this text.
            if await svc.call(_whole, rt.store, rec):
                return JSONResponse(context_body(svc, cid, rec=rec), status_code=200)
        except Exception as exc:
            if not isinstance(unwrap(exc), ContextNotFoundError):
                raise
        job = Job(id=f"load-{uuid.uuid4().hex}", kind="load", tenant=tenant, context_id=cid)
        await wait(svc.jobs.submit.remote(job, LoadPayload(text)))
        return JSONResponse(context_body(svc, cid, status="loading"), status_code=202,
                            headers={"Location": f"/v1/contexts/{cid}"})
    try:
        res = await svc.load(text, tenant)
    except APIError:
        raise
    except Exception as exc:
        err = svc.error(exc)
        if err.code == "context_too_long":
            err.param, err.limit = param, svc.cfg.model.max_context_tokens
        raise err from None
    return JSONResponse(context_body(svc, res.context_id, res=res), status_code=201 if res.prefilled else 200)


@router.get("/v1/contexts")
async def list_contexts(request: Request):
    svc = service_of(request)
    rt = await svc.call(svc.runtime)
    tenant = tenant_of(request)
    ids = await svc.call(rt.store.list_contexts, tenant)
    hidden = await svc.empty_context_id(tenant)  # the built-in no-document context
    return {"object": "list", "data": [{"id": c, "object": "context"} for c in ids if c != hidden]}


@router.get("/v1/contexts/{context_id}")
async def get_context(context_id: str, request: Request):
    svc, tenant = service_of(request), tenant_of(request)
    check_id(context_id, CONTEXT_ID_RE, "context_id")
    await svc.check_user_context(context_id, tenant)
    rt = await svc.call(svc.runtime)
    try:
        rec = await svc.call(rt.store.get_record, context_id, tenant)
        holders = await svc.call(rt.store.holders, context_id)
        return context_body(svc, context_id, rec=rec, holders=len(holders))
    except ContextNotFoundError:
        job: Job | None = await wait(svc.jobs.find_load.remote(tenant, context_id))
        if job is None or job.status == "succeeded":
            raise
        status = "failed" if job.status == "failed" else "loading"
        return context_body(svc, context_id, status=status, error=job.error, progress=job.progress)


@router.delete("/v1/contexts/{context_id}")
async def delete_context(context_id: str, request: Request):
    svc, tenant = service_of(request), tenant_of(request)
    check_id(context_id, CONTEXT_ID_RE, "context_id")
    await svc.check_user_context(context_id, tenant)
    rt = await svc.call(svc.runtime)
    await svc.call(rt.delete_context, context_id, tenant)
    svc.forget_empty(context_id=context_id)
    try:  # free the device copy on the replica that holds it (others evict it by LRU)
        await svc.model_call(svc.client.adrop_context(context_id), timeout_s=5.0)
    except Exception as exc:
        log.debug("drop_context on a replica failed: %s", exc)
    return {"id": context_id, "object": "context", "deleted": True}
