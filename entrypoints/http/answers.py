"""How a generation is reported in responses: the plan it read, token usage, the agentctx extension."""

from __future__ import annotations

from agentctx.entrypoints.schemas import PlanOut
from agentctx.serving.types import GenerateResult

__all__ = ["plan_out", "usage", "extension"]


def plan_out(plan, ctx_tokens: int) -> PlanOut:
    if plan is None:
        return PlanOut(pages=[], reasons=["all"], attended_tokens=ctx_tokens, context_tokens=ctx_tokens,
                       utilization=1.0, dense=True)
    return PlanOut(pages=list(plan.pages), reasons=list(plan.reasons), attended_tokens=plan.attended_tokens,
                   context_tokens=plan.context_tokens, utilization=round(plan.utilization, 6),
                   budget_tokens=plan.budget_tokens)


def usage(res: GenerateResult) -> dict:
    """OpenAI usage; ``prompt_tokens`` counts what the answer read: the prompt's own tokens plus the
    document tokens it attended (all of them when dense). The ``agentctx`` block splits them."""
    prompt = res.prompt_tokens + res.attended_tokens
    return {"prompt_tokens": prompt, "completion_tokens": len(res.token_ids),
            "total_tokens": prompt + len(res.token_ids),
            "agentctx": {"question_tokens": res.prompt_tokens, "document_tokens": res.attended_tokens,
                         "context_tokens": res.context_tokens, "pages_attended": res.pages_attended,
                         "utilization": round(res.attended_tokens / res.context_tokens, 6)
                         if res.context_tokens else None}}


def extension(res: GenerateResult, context_id: str) -> dict:
    return {"context_id": context_id, "pages_attended": res.pages_attended, "attended_tokens": res.attended_tokens,
            "context_tokens": res.context_tokens,
            "utilization": round(res.attended_tokens / res.context_tokens, 6) if res.context_tokens else None,
            "ttft_s": round(res.ttft_s, 6), "total_s": round(res.total_s, 6)}
