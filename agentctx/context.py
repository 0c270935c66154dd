"""Context: one holder's view of a loaded document.

A Context holds a store ``ContextHandle`` (a counted reference with a lease: the
KV stays alive while any Context is open), plans attention with the retrieval
service, and calls a model replica. It is what agents use; it never prefills.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass

from agentctx.retrieval.policy import AttendPlan, SelectionPolicy
from agentctx.serving.types import GenerateRequest, GenerateResult, ScoreRequest

__all__ = ["Context", "ContextInfo"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContextInfo:
    context_id: str
    tenant: str
    model_id: str
    num_tokens: int
    num_pages: int
    page_size: int
    prefix_tokens: int


class Context:
    """An open reference to a context. Close it (or use ``with``) to drop the reference."""

    def __init__(self, handle, client, retrieval, policy: SelectionPolicy, text: str | None = None):
        self.handle = handle
        self.client = client
        self.retrieval = retrieval  # RetrievalService or a Ray actor handle of one
        self.policy = policy
        rec = handle.record
        extra = rec.extra or {}
        self.info = ContextInfo(
            context_id=rec.context_id,
            tenant=rec.tenant,
            model_id=rec.model_id,
            num_tokens=rec.num_tokens,
            num_pages=len(rec.page_ids),
            page_size=int(extra.get("page_size", policy.page_size_tokens)),
            prefix_tokens=int(extra.get("prefix_tokens", 0)),
        )
        self.page_ids = list(rec.page_ids)
        self.char_spans = [tuple(s) for s in rec.char_spans]
        self._page_starts = [s for s, _ in self.char_spans]
        self._text = text

    # ------------------------------------------------------------------ identity
    @property
    def context_id(self) -> str:
        return self.info.context_id

    @property
    def tenant(self) -> str:
        return self.info.tenant

    @property
    def text(self) -> str:
        if self._text is None:
            from agentctx.kv_store.doc_blob import DOC_BLOB, decode_doc_blob

            self._text, _ = decode_doc_blob(self.handle.get_blob(DOC_BLOB))
        return self._text

    def page_of_char(self, offset: int) -> int:
        """Index of the page whose char span holds ``offset``."""
        return max(0, bisect.bisect_right(self._page_starts, offset) - 1)

    def section_pages(self, section_pages: int) -> list[list[int]]:
        n = self.info.num_pages
        return [list(range(s, min(s + section_pages, n))) for s in range(0, n, section_pages)]

    # ------------------------------------------------------------------ planning
    def plan(self, query: str, policy: SelectionPolicy | None = None,
             scope: tuple[int, int] | None = None) -> AttendPlan:
        """Pages for ``query``. ``scope``: a char range (one document of a case file) that retrieval
        keeps to; the sink page and the recent window are attended as always."""
        policy = policy or self.policy
        call = self.retrieval.plan
        kw = {} if scope is None else {"scope": (int(scope[0]), int(scope[1]))}
        if hasattr(call, "remote"):
            import ray

            return ray.get(call.remote(self.context_id, self.tenant, query, policy, **kw))
        return call(self.context_id, self.tenant, query, policy, **kw)

    def pages_plan(self, pages: list[int], policy: SelectionPolicy | None = None) -> AttendPlan:
        """A plan over given pages (e.g. one section) plus the policy's sink and recent pages."""
        from agentctx.retrieval.policy import plan_from_ranking

        policy = (policy or self.policy).model_copy(update={"top_k_pages": len(pages), "budget_fraction": None,
                                                             "budget_tokens": None, "neighbor_pages": 0})
        last = self.info.num_tokens - (self.info.num_pages - 1) * self.info.page_size
        return plan_from_ranking(pages, self.info.num_pages, last, policy)

    # ------------------------------------------------------------------ model calls
    @staticmethod
    def _pages(plan: AttendPlan | list[int] | None) -> tuple[int, ...] | None:
        if plan is None:
            return None
        return tuple(plan.pages) if isinstance(plan, AttendPlan) else tuple(plan)

    def generate(
        self,
        prompt: str,
        plan: AttendPlan | list[int] | None = None,
        *,
        max_new_tokens: int = 64,
        stop: tuple[str, ...] = (),
        temperature: float = 0.0,
        seed: int | None = None,
        copy_from: list[int] | None = None,
    ) -> GenerateResult:
        """Complete ``prompt`` (which continues right after the document). plan=None: dense.

        copy_from: constrain the output to a verbatim span of these pages (a quote)."""
        req = GenerateRequest(self.context_id, prompt, self._pages(plan), max_new_tokens, temperature,
                              tuple(stop), seed, tenant=self.tenant,
                              constraint="copy" if copy_from is not None else None,
                              copy_pages=tuple(copy_from) if copy_from else None)
        return self.client.generate(req)

    def score(self, prompt: str, options: list[str], plan: AttendPlan | list[int] | None = None,
              per_token: bool = False) -> list[float]:
        """Log-probability of each option continuing the prompt (per_token: mean per token)."""
        return self.client.score(ScoreRequest(self.context_id, prompt, tuple(options), self._pages(plan),
                                              tenant=self.tenant, per_token=per_token))

    def rank_texts(self, query: str, texts: list[str]) -> list[float]:
        """Embedding similarity of texts to a query (the retrieval service's model)."""
        call = self.retrieval.rank_texts
        if hasattr(call, "remote"):
            import ray

            return ray.get(call.remote(query, list(texts)))
        return call(query, list(texts))

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self.handle.close()

    @property
    def closed(self) -> bool:
        return self.handle.closed

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
