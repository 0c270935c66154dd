"""Request and response bodies of the HTTP API (pydantic), OpenAI-compatible where it applies.

Our own routes (``/v1/contexts``, ``/v1/pipelines``) are strict: an unknown field
is a 422 naming it, and a flag is JSON ``true``/``false`` (never ``"yes"`` or ``1``).
The OpenAI routes (``/v1/completions``, ``/v1/chat/completions``) ignore fields they
don't know, as OpenAI clients send many optional ones, but refuse values they cannot
honour (``n > 1``, ``logprobs``) with a 400 naming the parameter. Every error body has one shape::

    {"error": {"message": ..., "type": ..., "code": ..., "param": ..., "limit": ...}}

``param`` names the offending field (dotted path into the body), ``limit`` the
bound that was exceeded, when there is one.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "MAX_QUESTION_CHARS", "MAX_PROMPT_CHARS", "MAX_STOP", "MAX_STOP_CHARS", "CONTEXT_ID_RE", "RUN_ID_RE",
    "PIPELINE_NAME_RE", "ErrorDetail", "ErrorResponse", "CreateContextRequest", "ContextResponse",
    "QueryRequest", "PlanOut", "QueryResponse", "ReviewOptions", "PipelineRunRequest", "PipelineRunResponse",
    "CompletionRequest", "ChatMessage", "ChatCompletionRequest", "validation_error_detail",
    "UNSUPPORTED_OPENAI_PARAMS",
]

MAX_QUESTION_CHARS = 16_384
MAX_PROMPT_CHARS = 65_536
MAX_MESSAGES = 256
MAX_STOP = 4
MAX_STOP_CHARS = 64
MAX_SEED = 2**63 - 1

# Ids travel in URL paths: no slashes, no dot-dot, nothing a Redis key or a file name can't take.
CONTEXT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
RUN_ID_RE = re.compile(r"^run-[0-9a-f]{32}$")
PIPELINE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, protected_namespaces=())


# ---------------------------------------------------------------------------- errors
class ErrorDetail(BaseModel):
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    limit: int | float | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


_LIMIT_KEYS = ("le", "lt", "ge", "gt", "max_length", "min_length", "limit_value")


def validation_error_detail(exc: ValidationError, prefix: str = "") -> dict[str, Any]:
    """The first error of a pydantic ValidationError as ``{message, param, limit, errors}``."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0] if errors else {"loc": (), "msg": str(exc), "type": "value_error"}

    def param_of(err: dict) -> str | None:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        return ".".join(([prefix] if prefix else []) + loc) or (prefix or None)

    ctx = first.get("ctx") or {}
    limit = next((ctx[k] for k in _LIMIT_KEYS if k in ctx and isinstance(ctx[k], (int, float))), None)
    param = param_of(first)
    msg = first.get("msg", "invalid value")
    return {
        "message": f"{param}: {msg}" if param else msg,
        "param": param,
        "limit": limit,
        "code": first.get("type"),
        "errors": [{"param": param_of(e), "message": e.get("msg"), "code": e.get("type")} for e in errors[:10]],
    }


def _check_stop(v: Any) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, str):
        v = [v]
    if len(v) > MAX_STOP:
        raise ValueError(f"at most {MAX_STOP} stop strings")
    for s in v:
        if len(s) > MAX_STOP_CHARS:
            raise ValueError(f"stop strings are at most {MAX_STOP_CHARS} characters")
    return [s for s in v if s]


# ---------------------------------------------------------------------------- contexts
MAX_UPLOAD_DOCUMENTS = 100


class UploadDocument(_Strict):
    """One document of a case file uploaded as several documents."""

    name: str = Field(min_length=1, max_length=200, description="How the review names it (e.g. its file name)")
    text: str = Field(min_length=1, description="The document (UTF-8 text)")

    @field_validator("name")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if not v.strip() or any(c in v for c in "\r\n"):
            raise ValueError("a document name is one non-empty line")
        return v.strip()


class CreateContextRequest(_Strict):
    """``POST /v1/contexts`` as JSON: one document (``text``) or a case file of several (``documents``:
    one context, one prefill, each document named and reviewed apart). A multipart upload sends its
    file(s) as ``file`` part(s)."""

    text: str | None = Field(None, min_length=1, description="The document (UTF-8 text)")
    documents: list[UploadDocument] | None = Field(None, min_length=1, max_length=MAX_UPLOAD_DOCUMENTS,
                                                   description="Several named documents, in order, instead of text")
    async_: StrictBool = Field(False, alias="async",
                         description="Answer 202 at once and load in the background (poll status_url)")
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("documents")
    @classmethod
    def _named_apart(cls, v: list[UploadDocument] | None, info: ValidationInfo) -> list[UploadDocument] | None:
        if v is not None and info.data.get("text") is not None:
            raise ValueError("give either text or documents, not both")
        names = [d.name for d in v or []]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"document names must differ; repeated: {dup}")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> "CreateContextRequest":
        if self.text is None and self.documents is None:
            raise ValueError("give the document as text, or several as documents")
        return self


class ContextResponse(BaseModel):
    id: str
    object: Literal["context"] = "context"
    status: Literal["ready", "loading", "failed"] = "ready"
    model: str | None = None
    num_tokens: int | None = None
    num_pages: int | None = None
    page_size: int | None = None
    prefilled: bool | None = Field(None, description="False when the document was already loaded (reattached)")
    prefill_s: float | None = None
    index_s: float | None = None
    total_s: float | None = None
    holders: int | None = None
    status_url: str | None = None
    progress: dict[str, Any] | None = Field(
        None, description="While loading: tokens_done, tokens_total, elapsed_s, tokens_per_s, eta_s of the prefill")
    error: ErrorDetail | None = None


# ---------------------------------------------------------------------------- query
class QueryRequest(_Strict):
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    max_new_tokens: int = Field(64, ge=1, description="Capped by serve.max_new_tokens")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: list[str] | str | None = Field(None, description=f"Up to {MAX_STOP} stop strings")
    stream: StrictBool = Field(False, description="Server-sent events: plan, delta..., done")
    dense: StrictBool = Field(False, description="Attend every page (no retrieval)")
    budget_fraction: float | None = Field(None, gt=0.0, le=1.0)
    top_k_pages: int | None = Field(None, ge=0, le=1 << 16)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Any) -> list[str] | None:
        return _check_stop(v)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("question is blank")
        return v


class PlanOut(BaseModel):
    pages: list[int]
    reasons: list[str]
    attended_tokens: int
    context_tokens: int
    utilization: float
    budget_tokens: int | None = None
    dense: bool = False


class Usage(BaseModel):
    prompt_tokens: int = Field(description="Prompt tokens + the document tokens the answer attended")
    completion_tokens: int
    total_tokens: int
    agentctx: dict[str, Any] | None = Field(None, description="question/document tokens, pages, utilization")


class QueryResponse(BaseModel):
    context_id: str
    question: str
    answer: str
    plan: PlanOut
    pages_attended: int
    attended_tokens: int
    context_tokens: int
    utilization: float
    finish_reason: str
    ttft_s: float
    total_s: float
    usage: Usage


# ---------------------------------------------------------------------------- pipelines
class ReviewOptions(_Strict):
    """Options of the built-in ``document_review`` pipeline."""

    clause_kinds: list[str] | None = Field(None, min_length=1, max_length=64)
    summarize: StrictBool = True
    dense: StrictBool = False


class PipelineRunRequest(_Strict):
    context_id: str = Field(min_length=1, max_length=128)
    options: ReviewOptions | None = Field(None, description="document_review only")
    spec: dict[str, Any] | None = Field(None, description="An inline PipelineSpec (its name must match the path)")


class PipelineRunResponse(BaseModel):
    id: str
    object: Literal["pipeline.run"] = "pipeline.run"
    pipeline: str
    context_id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    status_url: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None


# ---------------------------------------------------------------------------- OpenAI
#: OpenAI parameters we do not implement: a request that sets one is refused with a 400 naming it,
#: never answered as if it had not been sent. (Unset, null, false or empty counts as not sent.)
UNSUPPORTED_OPENAI_PARAMS = ("tools", "tool_choice", "functions", "function_call", "logit_bias", "top_logprobs",
                             "audio", "prediction", "web_search_options", "reasoning_effort", "verbosity")


class _OpenAICommon(_Lenient):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, description="As the query route: at least 1 (0 is refused)")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=1 << 20, description="Extension (vLLM's): 0 = off")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="Extension (vLLM's)")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0, description="Extension (vLLM's): a seen "
                                             "token's positive logit divided by it, a negative one multiplied")
    min_tokens: int | None = Field(None, ge=0, description="Extension (vLLM's): no end of text before this many")
    ignore_eos: bool | None = Field(None, description="Extension (vLLM's): generate through end-of-text tokens")
    response_format: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1, le=128)
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    stop: list[str] | str | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    logprobs: Any = None
    user: str | None = Field(None, max_length=256)
    modalities: list[str] | None = None
    # not implemented: refused when set (UNSUPPORTED_OPENAI_PARAMS)
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    logit_bias: Any = None
    top_logprobs: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    # agentctx extensions
    context_id: str | None = Field(None, min_length=1, max_length=128, description="Answer over this context")
    dense: bool = False
    budget_fraction: float | None = Field(None, gt=0.0, le=1.0)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Any) -> list[str] | None:
        return _check_stop(v)


class CompletionRequest(_OpenAICommon):
    prompt: str | list[str] = Field(description="One prompt (a list of one string is accepted)")
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str:
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("exactly one prompt per request")
            v = v[0]
        if not v:
            raise ValueError("prompt is empty")
        if len(v) > MAX_PROMPT_CHARS:
            raise ValueError(f"prompt longer than {MAX_PROMPT_CHARS} characters")
        return v


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(None, max_length=64)

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(_OpenAICommon):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1)
