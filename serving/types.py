"""Typed request/result objects at the engine boundary (plain dataclasses: cheap to pickle over Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tensors only in annotations: this module loads without torch
    import torch

__all__ = [
    "ContextTooLongError", "EmptyInputError", "TokenizedDoc", "PrefillResult", "GenerateRequest", "GenerateResult",
    "ScoreRequest", "SamplingParams", "DOC_PREFIX", "PrefillState",
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
    resumed_tokens: int = 0  # tokens a checkpoint already had (not computed again)


@dataclass(frozen=True)
class PrefillState:
    """A chunked prefill stopped at a page boundary: tokens ``[0, num_tokens)`` are computed.

    ``pages[j]`` is page ``first_page + j`` in the store's layout ``(L_global, 2, P, Hkv, D)``;
    ``window`` is the sliding layers' last ``Wt = min(W, num_tokens)`` tokens
    ``(L_sliding, 2, Wt, Hkv, D)`` (None without sliding layers), the one thing pages do not hold.
    To resume, ``first_page`` is 0 and ``pages`` covers every computed token.
    """

    num_tokens: int
    first_page: int
    pages: list[torch.Tensor]
    window: torch.Tensor | None


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is picked beyond temperature (``serving/engine/reference_sampling.py`` ``pick_token``).

    Defaults change nothing: greedy stays the argmax, sampling stays a draw from the softmax.
    """

    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches top_p
    top_k: int = 0  # keep the k most likely tokens (0: all)
    min_p: float = 0.0  # drop tokens below min_p x the most likely token's probability
    presence_penalty: float = 0.0  # subtracted from the logit of every token generated at least once
    frequency_penalty: float = 0.0  # subtracted once per earlier occurrence
    # vLLM's: a logit of a token seen in the prompt or the output is divided by it when positive,
    # multiplied when negative (1: off)
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.top_p <= 1.0:  # 0 keeps only the most likely token
            raise ValueError(f"top_p must be in [0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def is_default(self) -> bool:
        return self == _DEFAULT_SAMPLING


_DEFAULT_SAMPLING = SamplingParams()


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
    sampling: SamplingParams | None = None  # top-p/top-k/min-p and penalties (None: plain temperature)
    min_tokens: int = 0  # no stop token (end of text) before this many tokens (vLLM's min_tokens)
    ignore_eos: bool = False  # generate through stop tokens, up to max_new_tokens (vLLM's ignore_eos)


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
