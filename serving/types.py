"""Typed request/result objects at the engine boundary (plain dataclasses: cheap to pickle over Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "ContextTooLongError", "EmptyInputError", "TokenizedDoc", "PrefillResult", "GenerateRequest", "GenerateResult",
    "ScoreRequest", "DOC_PREFIX",
]

# Every document is prefilled behind the same short preamble so that all agents
# share one prefix; each query then continues after the document.
DOC_PREFIX = "Document:\n"


class EmptyInputError(ValueError):
    """An empty document or query."""


class ContextTooLongError(ValueError):
    """The document exceeds the configured maximum context length."""


@dataclass(frozen=True)
class TokenizedDoc:
    """A document as the model sees it. offsets[i] = (char_start, char_end) of token i in ``text``."""

    text: str
    token_ids: list[int]
    offsets: list[tuple[int, int]]
    prefix_tokens: int  # tokens of BOS + DOC_PREFIX before the document text


@dataclass(frozen=True)
class PrefillResult:
    context_id: str
    num_tokens: int
    num_pages: int
    page_size: int
    kv_bytes: int
    prefill_s: float
    reused_pages: int = 0


@dataclass(frozen=True)
class GenerateRequest:
    """One completion over a context. pages=None attends to every page (dense)."""

    context_id: str
    prompt: str
    pages: tuple[int, ...] | None = None
    max_new_tokens: int = 64
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tenant: str = "default"
    request_id: str | None = None
    # "copy": output is constrained to verbatim spans of the attended pages (quotes
    # that are source text by construction); None: free generation.
    constraint: str | None = None
    copy_pages: tuple[int, ...] | None = None  # pages a "copy" quote may come from (default: attended)


@dataclass
class GenerateResult:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    pages_attended: int
    attended_tokens: int  # document tokens read by global layers
    context_tokens: int
    ttft_s: float
    total_s: float
    finish_reason: str  # "stop" | "length"
    replica: str = ""
    timings: dict = field(default_factory=dict)

    @property
    def decode_tokens_per_s(self) -> float:
        n = len(self.token_ids)
        dt = self.total_s - self.ttft_s
        return (n - 1) / dt if n > 1 and dt > 0 else 0.0


@dataclass(frozen=True)
class ScoreRequest:
    """Log-probability of each option continuing ``prompt`` (constrained choice)."""

    context_id: str
    prompt: str
    options: tuple[str, ...]
    pages: tuple[int, ...] | None = None
    tenant: str = "default"
    per_token: bool = False  # mean log-prob per option token (length-normalised) instead of the sum
