"""``/v1/contexts``: upload (JSON or multipart, one document or a case file of several; large or
``async`` uploads load in the background), list, status, delete."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from agentctx.entrypoints.http.body import bool_field, check_id, multipart_parts, read_body, read_json
from agentctx.entrypoints.http.errors import APIError, unwrap
from agentctx.entrypoints.http.jobs import Job, LoadPayload
from agentctx.entrypoints.http.restore_jobs import is_whole
from agentctx.entrypoints.http.service import ApiService, service_of, tenant_of, wait
from agentctx.entrypoints.schemas import CONTEXT_ID_RE, MAX_UPLOAD_DOCUMENTS, ContextResponse, CreateContextRequest
from agentctx.kv_store.errors import ContextNotFoundError
from agentctx.retrieval.documents import join_documents
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


async def _upload(request: Request, limit: int) -> tuple[str, bool, str]:
    """(text, load in the background, the field named in errors) of an upload. Several documents
    (JSON ``documents``, or several multipart ``file`` parts) are joined into one text, each after
    a header line naming it (retrieval.documents): one context, reviewed document by document."""
    ctype = request.headers.get("content-type", "")
    if ctype.split(";", 1)[0].strip().lower() == "multipart/form-data":
        raw = multipart_parts(await read_body(request, limit), ctype)
        files = [(f, b) for n, b, f in raw if n == "file"] or [(f, b) for n, b, f in raw if f][:1] \
            or [(f, b) for n, b, f in raw if n == "text"][:1]
        if not files:
            raise APIError(422, "multipart upload needs a 'file' part", code="missing", param="file")
        docs = [(name or f"document {i + 1}", _utf8(body, "file" if len(files) == 1 else f"file[{i}]"))
                for i, (name, body) in enumerate(files)]
        flag = next((b for n, b, _ in raw if n == "async"), None)
        return _joined(docs, "file"), bool_field(flag, "async"), "file"
    body = await read_json(request, CreateContextRequest, limit)
    if body.documents is not None:
        return _joined([(d.name, d.text) for d in body.documents], "documents"), body.async_, "documents"
    return body.text, body.async_, "text"


def _utf8(body: bytes, param: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"{param} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                       code="invalid_utf8", param=param) from None


def _joined(docs: list[tuple[str, str]], param: str) -> str:
    """One document's text as sent; several joined with a header naming each (422 on an empty one
    or two of one name, before anything is stored)."""
    if len(docs) == 1:
        return docs[0][1]
    if len(docs) > MAX_UPLOAD_DOCUMENTS:
        raise APIError(422, f"at most {MAX_UPLOAD_DOCUMENTS} documents in one context", code="too_many_documents",
                       param=param)
    names = [" ".join(n.split()) for n, _ in docs]
    for i, (name, text) in enumerate(docs):
        if not text.strip():
            raise APIError(422, f"document {name!r} is empty", code="empty_input", param=f"{param}[{i}]")
        if names.count(names[i]) > 1:
            raise APIError(422, f"two documents are named {name!r}; names must differ", code="duplicate_name",
                           param=f"{param}[{i}]")
    return join_documents(list(zip(names, (t for _, t in docs), strict=True)))


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
        if (restoring := svc.restores.running(cid, tenant)) is not None:  # a second prefill would race it
            return JSONResponse(context_body(svc, cid, status="loading", progress=restoring.progress),
                                status_code=202, headers={"Location": f"/v1/contexts/{cid}"})
        rt = await svc.call(svc.runtime)
        try:
            rec = await svc.call(rt.store.get_record, cid, tenant)
            # Loaded and whole: nothing to do. Loaded but missing pages or blobs (a restart): the
            # load job below rebuilds it from this text.
            if await svc.call(is_whole, rt.store, rec):
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
        # Listed, but its lost pages are being put back: "loading" as for an upload, with the progress.
        restoring = svc.restores.running(context_id, tenant)
        if restoring is not None:
            return context_body(svc, context_id, rec=rec, holders=len(holders), status="loading",
                                progress=restoring.progress)
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
    svc.restores.forget(context_id, tenant)
    try:  # free the device copy on the replica that holds it (others evict it by LRU)
        await svc.model_call(svc.client.adrop_context(context_id), timeout_s=5.0)
    except Exception as exc:
        log.debug("drop_context on a replica failed: %s", exc)
    return {"id": context_id, "object": "context", "deleted": True}
