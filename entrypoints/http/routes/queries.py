"""``POST /v1/contexts/{id}/query``: a question -> the plan (pages attended) and the answer;
``stream: true`` gives server-sent events ``plan``, ``delta``..., ``done`` (or ``error``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from agentctx.entrypoints.http.answers import extension, plan_out, usage
from agentctx.entrypoints.http.body import SSE_HEADERS, check_id, read_json, sse
from agentctx.entrypoints.http.service import ApiService, service_of, tenant_of
from agentctx.entrypoints.schemas import CONTEXT_ID_RE, PlanOut, QueryRequest, QueryResponse
from agentctx.serving.types import GenerateRequest

__all__ = ["router"]

router = APIRouter()

_QA_STOP = ("\n\n", "\nQuestion:")


@router.post("/v1/contexts/{context_id}/query")
async def query(context_id: str, request: Request):
    svc, tenant = service_of(request), tenant_of(request)
    check_id(context_id, CONTEXT_ID_RE, "context_id")
    body: QueryRequest = await read_json(request, QueryRequest, svc.body_limit)
    svc.check_max_tokens(body.max_new_tokens, "max_new_tokens")
    policy = svc.policy_for(body.dense, body.budget_fraction, body.top_k_pages)
    await svc.check_user_context(context_id, tenant)
    ctx = await svc.attach(context_id, tenant)
    handed_off = False
    try:
        plan = await svc.plan(ctx, body.question, policy)
        stop = tuple(body.stop) if body.stop is not None else _QA_STOP
        req = GenerateRequest(context_id, f"\n\nQuestion: {body.question}\nAnswer:",
                              None if plan is None else tuple(plan.pages), body.max_new_tokens,
                              body.temperature, stop, body.seed, tenant=tenant,
                              request_id=request.state.request_id)
        planned = plan_out(plan, ctx.info.num_tokens)
        if body.stream:
            handed_off = True
            return StreamingResponse(_events(svc, ctx, req, planned, body.question),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        res = await svc.generate(req)
    finally:
        if not handed_off:
            svc.close_later(ctx)
    svc.metrics.observe_generation("query", res)
    return QueryResponse(context_id=context_id, question=body.question, answer=res.text.strip(), plan=planned,
                         pages_attended=res.pages_attended, attended_tokens=res.attended_tokens,
                         context_tokens=res.context_tokens,
                         utilization=round(res.attended_tokens / res.context_tokens, 6) if res.context_tokens
                         else 0.0, finish_reason=res.finish_reason, ttft_s=round(res.ttft_s, 6),
                         total_s=round(res.total_s, 6), usage=usage(res)).model_dump()


async def _events(svc: ApiService, ctx, req: GenerateRequest, planned: PlanOut, question: str):
    try:
        yield sse(planned.model_dump(), "plan")
        async for kind, value in svc.stream(req):
            if kind == "delta":
                yield sse({"text": value}, "delta")
            else:
                svc.metrics.observe_generation("query", value)
                yield sse({"context_id": req.context_id, "question": question, "answer": value.text.strip(),
                           "finish_reason": value.finish_reason, "usage": usage(value),
                           **{k: v for k, v in extension(value, req.context_id).items() if k != "context_id"}},
                          "done")
    except Exception as exc:
        yield sse(svc.count(svc.error(exc)).body(), "error")
    finally:
        svc.close_later(ctx)
