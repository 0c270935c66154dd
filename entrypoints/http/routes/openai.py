"""OpenAI-compatible routes: ``/v1/completions``, ``/v1/chat/completions`` (each with a ``context_id``
extension) and ``/v1/models``.

Without ``context_id`` a request is answered over a tiny built-in document, ``"(no document)"``,
created once per tenant: the model has no document to read, but plain OpenAI clients work
unchanged. ``stream: true`` gives OpenAI chunks and ``data: [DONE]``.
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from agentctx.entrypoints.http.answers import extension, usage
from agentctx.entrypoints.http.body import SSE_HEADERS, check_id, read_json, sse
from agentctx.entrypoints.http.errors import APIError, unwrap
from agentctx.entrypoints.http.service import ApiService, service_of, tenant_of
from agentctx.entrypoints.schemas import CONTEXT_ID_RE, MAX_PROMPT_CHARS, ChatCompletionRequest, CompletionRequest
from agentctx.kv_store.errors import ContextNotFoundError
from agentctx.serving.types import GenerateRequest

__all__ = ["router", "render_chat"]

router = APIRouter()

_CHAT_STOP = ("\nUser:",)


@router.get("/v1/models")
async def models(request: Request):
    svc = service_of(request)
    mid = await svc.model_id()
    return {"object": "list", "data": [{"id": mid, "object": "model", "created": svc.started_at,
                                        "owned_by": "agentctx"}]}


@router.post("/v1/completions")
async def completions(request: Request):
    svc = service_of(request)
    body: CompletionRequest = await read_json(request, CompletionRequest, svc.body_limit)
    _check_supported(body)
    if body.suffix:
        raise APIError(400, "suffix is not supported", code="unsupported_parameter", param="suffix")
    if body.best_of not in (None, 1):
        raise APIError(400, "only best_of=1 is supported", code="unsupported_parameter", param="best_of")
    max_tokens = 16 if body.max_tokens is None else body.max_tokens
    return await _generate(svc, request, body, body.prompt, body.prompt, max_tokens, "max_tokens", chat=False)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    svc = service_of(request)
    body: ChatCompletionRequest = await read_json(request, ChatCompletionRequest, svc.body_limit)
    _check_supported(body)
    prompt, last_user = render_chat(body.messages)
    if body.max_completion_tokens is not None:
        max_tokens, param = body.max_completion_tokens, "max_completion_tokens"
    elif body.max_tokens is not None:
        max_tokens, param = body.max_tokens, "max_tokens"
    else:
        max_tokens, param = min(256, svc.cfg.serve.max_new_tokens), "max_tokens"
    return await _generate(svc, request, body, prompt, last_user, max_tokens, param, chat=True)


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


def _check_supported(body) -> None:
    if body.n not in (None, 1):
        raise APIError(400, "only n=1 is supported", code="unsupported_parameter", param="n")
    if body.logprobs not in (None, False, 0):
        raise APIError(400, "logprobs are not supported", code="unsupported_parameter", param="logprobs")


async def _model_name(svc: ApiService, name: str | None) -> str:
    mid = await svc.model_id()
    if name and name not in (mid, "agentctx", "default"):
        raise APIError(404, f"model {name!r} not found; see /v1/models", code="model_not_found", param="model")
    return mid


async def _context(svc: ApiService, body, tenant: str):
    """An open reference to the request's context (the tenant's empty document without one)."""
    if body.context_id is not None:
        check_id(body.context_id, CONTEXT_ID_RE, "context_id")
        cid = body.context_id
    else:
        cid = await svc.empty_context(tenant)
    try:
        return await svc.attach(cid, tenant)
    except Exception as exc:
        if body.context_id is None and isinstance(unwrap(exc), ContextNotFoundError):
            svc.forget_empty(tenant=tenant)  # deleted behind our back: make it again
            return await svc.attach(await svc.empty_context(tenant), tenant)
        raise


async def _generate(svc: ApiService, request: Request, body, prompt: str, query_text: str, max_tokens: int,
                    param: str, chat: bool):
    tenant = tenant_of(request)
    model = await _model_name(svc, body.model)
    svc.check_max_tokens(max_tokens, param)
    policy = svc.policy_for(body.dense, body.budget_fraction, None)
    ctx = await _context(svc, body, tenant)
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
            echo = prompt if getattr(body, "echo", False) else ""
            return StreamingResponse(_events(svc, ctx, req, oid, created, model, chat, include_usage, echo),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        res = await svc.generate(req)
    finally:
        if not handed_off:
            svc.close_later(ctx)
    svc.metrics.observe_generation("chat" if chat else "completions", res)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": res.text},
                  "logprobs": None, "finish_reason": res.finish_reason}
        obj = "chat.completion"
    else:
        text = (prompt + res.text) if getattr(body, "echo", False) else res.text
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": res.finish_reason}
        obj = "text_completion"
    return {"id": oid, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": usage(res), "agentctx": extension(res, ctx.context_id)}


async def _events(svc: ApiService, ctx, req, oid, created, model, chat, include_usage, echo: str):
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: str | None, finish: str | None, role: bool = False) -> bytes:
        if chat:
            d: dict = {"role": "assistant", "content": ""} if role else ({} if delta is None else {"content": delta})
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
                               "usage": usage(value)})
        yield b"data: [DONE]\n\n"
    except Exception as exc:
        yield sse(svc.count(svc.error(exc)).body())
    finally:
        svc.close_later(ctx)
