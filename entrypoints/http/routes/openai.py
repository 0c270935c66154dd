"""OpenAI-compatible routes: ``/v1/completions``, ``/v1/chat/completions`` (each with a ``context_id``
extension), ``/v1/models`` and ``/v1/models/{id}``.

Without ``context_id`` a request is answered over the tenant's no-document context (the BOS
token alone: no placeholder text); a chat there goes through the checkpoint's chat template when
it has one. ``stream: true`` gives OpenAI chunks and ``data: [DONE]``.

No parameter is silently ignored: ``temperature``, ``top_p``, ``top_k``, ``min_p``,
``presence_penalty``, ``frequency_penalty``, ``repetition_penalty``, ``min_tokens``, ``ignore_eos``
(vLLM's extensions), ``seed``, ``stop`` and ``response_format``
(``json_object``, ``json_schema``: structured_output.py) are honoured; ``n > 1``, ``logprobs``,
``tools``/``tool_choice``, ``logit_bias`` and the other ``UNSUPPORTED_OPENAI_PARAMS`` are refused
with a 400 naming the parameter.
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
from agentctx.entrypoints.http.structured_output import fill_response, response_model
from agentctx.entrypoints.schemas import (
    CONTEXT_ID_RE,
    MAX_PROMPT_CHARS,
    UNSUPPORTED_OPENAI_PARAMS,
    ChatCompletionRequest,
    CompletionRequest,
)
from agentctx.kv_store.errors import ContextNotFoundError
from agentctx.serving.types import GenerateRequest, SamplingParams

__all__ = ["router", "render_chat"]

router = APIRouter()

_CHAT_STOP = ("\nUser:",)


def _model_card(svc: ApiService, mid: str) -> dict:
    return {"id": mid, "object": "model", "created": svc.started_at, "owned_by": "agentctx"}


@router.get("/v1/models")
async def models(request: Request):
    svc = service_of(request)
    return {"object": "list", "data": [_model_card(svc, await svc.model_id())]}


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request):
    svc = service_of(request)
    mid = await svc.model_id()
    if model_id != mid:
        raise APIError(404, f"model {model_id[:200]!r} not found; see /v1/models", type="not_found",
                       code="model_not_found", param="model")
    return _model_card(svc, mid)


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
    if body.context_id is None:  # no document: the checkpoint's own chat format when it has one
        prompt, last_user = await _render_no_document(svc, body.messages)
    else:
        prompt, last_user = render_chat(body.messages)
    if body.max_completion_tokens is not None:
        max_tokens, param = body.max_completion_tokens, "max_completion_tokens"
    elif body.max_tokens is not None:
        max_tokens, param = body.max_tokens, "max_tokens"
    else:
        max_tokens, param = min(256, svc.cfg.serve.max_new_tokens), "max_tokens"
    return await _generate(svc, request, body, prompt, last_user, max_tokens, param, chat=True)


async def _render_no_document(svc: ApiService, messages) -> tuple[str, str]:
    """(prompt, last user turn) of a chat without a document: the chat template, else plain turns."""
    await svc.model_id()
    if svc.has_chat_template:
        turns = []
        for m in messages:
            try:
                turns.append({"role": "system" if m.role == "developer" else m.role, "content": m.text()})
            except ValueError as exc:
                raise APIError(400, str(exc), code="unsupported_content", param="messages") from None
        prompt = await svc.model_call(svc.client.arender_chat(turns))
        if prompt is not None:
            if len(prompt) > MAX_PROMPT_CHARS:
                raise APIError(422, f"messages longer than {MAX_PROMPT_CHARS} characters in total",
                               code="string_too_long", param="messages", limit=MAX_PROMPT_CHARS)
            last_user = next((t["content"] for t in reversed(turns) if t["role"] == "user"), turns[-1]["content"])
            return prompt, last_user
    prompt, last_user = render_chat(messages)
    return prompt.lstrip("\n"), last_user


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
    for name in UNSUPPORTED_OPENAI_PARAMS:
        value = getattr(body, name, None)
        if value not in (None, False, "none") and value != [] and value != {}:
            raise APIError(400, f"{name} is not supported by this server", code="unsupported_parameter", param=name)
    if body.modalities not in (None, ["text"]):
        raise APIError(400, "only text output is supported", code="unsupported_parameter", param="modalities")
    response_model(body.response_format)  # 400 now for an unsupported format or schema


def _sampling(body) -> SamplingParams | None:
    params = SamplingParams(top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0,
                            min_p=body.min_p or 0.0, presence_penalty=body.presence_penalty or 0.0,
                            frequency_penalty=body.frequency_penalty or 0.0,
                            repetition_penalty=body.repetition_penalty or 1.0)
    return None if params.is_default else params


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
    if body.min_tokens and body.min_tokens > max_tokens:
        raise APIError(422, f"min_tokens ({body.min_tokens}) must be <= {param} ({max_tokens})",
                       code="less_than_equal", param="min_tokens")
    policy = svc.policy_for(body.dense, body.budget_fraction, None)
    ctx = await _context(svc, body, tenant)
    handed_off = False
    try:
        plan = None
        if policy is not None and ctx.info.num_pages > 1:
            plan = await svc.plan(ctx, query_text[-4000:] or prompt[-4000:], policy)
        stop = tuple(body.stop) if body.stop is not None else (_CHAT_STOP if chat else ())
        temperature = 1.0 if body.temperature is None else body.temperature
        req = GenerateRequest(ctx.context_id, prompt, None if plan is None else tuple(plan.pages), max_tokens,
                              temperature, stop, body.seed, tenant=tenant, request_id=request.state.request_id,
                              sampling=_sampling(body), min_tokens=body.min_tokens or 0,
                              ignore_eos=bool(body.ignore_eos))
        oid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        schema = response_model(body.response_format)
        if schema is not None:  # the constrained fill: a JSON object that validates, in one piece
            res = await svc.call(fill_response, svc.client, req, schema, ctx.info.num_tokens)
            if body.stream:
                include_usage = bool((body.stream_options or {}).get("include_usage"))
                handed_off = True
                return StreamingResponse(_whole(svc, ctx, res, oid, created, model, chat, include_usage),
                                         media_type="text/event-stream", headers=SSE_HEADERS)
        elif body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            handed_off = True
            echo = prompt if getattr(body, "echo", False) else ""
            return StreamingResponse(_events(svc, ctx, req, oid, created, model, chat, include_usage, echo),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        else:
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


async def _whole(svc: ApiService, ctx, res, oid, created, model, chat, include_usage):
    """A finished result (a filled JSON object) as one stream: role, the text, finish, usage."""

    async def one():
        yield "delta", res.text
        yield "result", res

    try:
        async for part in _events(svc, None, None, oid, created, model, chat, include_usage, "", source=one()):
            yield part
    finally:
        svc.close_later(ctx)


async def _events(svc: ApiService, ctx, req, oid, created, model, chat, include_usage, echo: str, source=None):
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
        async for kind, value in (source if source is not None else svc.stream(req)):
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
