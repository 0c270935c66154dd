"""Which pages a query attends to: sink + retrieved (+ neighbours) + recent.

The attention kernel reads only the pages in an :class:`AttendPlan`. The plan
always holds the first ``sink_pages`` pages (attention sinks: models put
large weight on the first tokens, and dropping them degrades output) and the
pages covering the last ``recent_tokens`` tokens (the local window, where the
question and the latest turns live). The rest is filled by retrieval rank,
either a fixed ``top_k_pages`` or up to a token budget, optionally adding the
``neighbor_pages`` on each side of a retrieved page so that a fact straddling
a page boundary is read whole.

A retrieved page whose evidence passage runs onto another page brings that
page in right after it (reason ``neighbor``, within the budget, before any
lower-ranked page): the half of a definition on the next page ranks where it
ranks, but the answer needs both. A retrieved page whose evidence repeats, word for word, the
evidence of a page ranked above it (a second copy of the same licence or clause) is read only
after every page with new evidence. A plan may be scoped to a char range (one
document of a case file): pages outside it are not retrieved; the sink page and
the recent window stay.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .document import PageRetriever
from .hierarchical import RetrieveResult

__all__ = ["SelectionPolicy", "AttendPlan", "Reason", "plan", "plan_from_ranking"]

Reason = Literal["sink", "recent", "retrieved", "neighbor", "all"]


class SelectionPolicy(BaseModel):
    """How many pages a query may attend to, and which kinds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size_tokens: int = Field(256, gt=0, description="Tokens per KV page; also the retrieval chunk.")
    sink_pages: int = Field(1, ge=0, description="Leading pages always attended (attention sink).")
    top_k_pages: int | None = Field(
        32, ge=0, description="Retrieved pages beyond sink/recent, when no budget is set."
    )
    budget_fraction: float | None = Field(
        None, gt=0.0, le=1.0, description="Attend up to this fraction of the context's tokens."
    )
    budget_tokens: int | None = Field(None, gt=0, description="Attend up to this many tokens in total.")
    neighbor_pages: int = Field(
        0, ge=0, le=8, description="Pages added on each side of every retrieved page."
    )
    recent_tokens: int = Field(1024, ge=0, description="Trailing tokens always attended (local window).")
    evidence_pages: bool = Field(
        True, description="A retrieved page whose evidence passage runs onto other pages brings them in "
        "right after it (within the budget).")
    tight_budget_pages: int = Field(
        8, ge=0, description="A budget that leaves fewer pages than this for retrieval is tight: the recent "
        "window is then rounded to the nearer page boundary instead of out to a page it barely touches "
        "(0: never).")
    demote_repeats: bool = Field(
        True, description="A retrieved page whose evidence text repeats a higher-ranked page's evidence "
        "(another copy of the same sentence) goes after every page with new evidence.")
    method: Literal["hybrid", "dense", "lexical"] = Field(
        "hybrid",
        description="How pages are ranked: fusion of dense passage embeddings and BM25 (hybrid), "
        "or either alone.",
    )

    @model_validator(mode="after")
    def _check_budget(self) -> "SelectionPolicy":
        if self.budget_fraction is not None and self.budget_tokens is not None:
            raise ValueError("set at most one of budget_fraction and budget_tokens")
        if self.has_budget and "top_k_pages" in self.model_fields_set and self.top_k_pages is not None:
            raise ValueError("top_k_pages and a budget are exclusive; set top_k_pages=None or drop the budget")
        if self.budget_tokens is not None and self.budget_tokens < self.mandatory_tokens:
            raise ValueError(
                f"budget_tokens={self.budget_tokens} is below the mandatory "
                f"sink_pages*page_size_tokens + recent_tokens = {self.sink_pages}*{self.page_size_tokens}"
                f" + {self.recent_tokens} = {self.mandatory_tokens}"
            )
        return self

    @property
    def has_budget(self) -> bool:
        return self.budget_fraction is not None or self.budget_tokens is not None

    @property
    def mandatory_tokens(self) -> int:
        """Least tokens any plan holds: sink pages plus the recent window."""
        return self.sink_pages * self.page_size_tokens + self.recent_tokens

    def budget_for(self, context_tokens: int) -> int | None:
        """Token budget for a context of ``context_tokens`` (``None`` in top-k mode)."""
        if self.budget_tokens is not None:
            return self.budget_tokens
        if self.budget_fraction is not None:
            return math.ceil(self.budget_fraction * context_tokens)
        return None


@dataclass(frozen=True)
class AttendPlan:
    """Pages one query attends to.

    Attributes:
        pages: distinct page indices in document order.
        reasons: why each page is in (aligned with ``pages``).
        attended_tokens: tokens in those pages (the last page may be partial).
        context_tokens: tokens in the whole document.
        budget_tokens: the budget applied, or ``None`` in top-k mode.
        all_pages: the budget covered the whole document.
        method: how retrieved pages were ranked (``hybrid``, ``dense``, ``lexical``; ``given``
            when the caller passed the ranking; ``none`` when no page needed ranking).
        retrieval: the ranking used, with its timing and per-page evidence (``None`` if not needed).
    """

    pages: tuple[int, ...]
    reasons: tuple[Reason, ...]
    attended_tokens: int
    context_tokens: int
    budget_tokens: int | None = None
    all_pages: bool = False
    method: str = "none"
    retrieval: RetrieveResult | None = field(default=None, compare=False, repr=False)

    @property
    def utilization(self) -> float:
        """Attended share of the context, ``attended_tokens / context_tokens``."""
        return self.attended_tokens / self.context_tokens if self.context_tokens else 0.0

    def reason_of(self, page: int) -> Reason | None:
        try:
            return self.reasons[self.pages.index(page)]
        except ValueError:
            return None

    def pages_with(self, reason: Reason) -> tuple[int, ...]:
        return tuple(p for p, r in zip(self.pages, self.reasons) if r == reason)

    def evidence_of(self, page: int) -> tuple[int, int] | None:
        """Char span of the passage that got ``page`` retrieved (``None`` if it was not ranked)."""
        r = self.retrieval
        if r is None or not r.evidence:
            return None
        hits = np.flatnonzero(r.pages == page)
        return r.evidence[int(hits[0])] if len(hits) and int(hits[0]) < len(r.evidence) else None


def _page_tokens(page: int, num_pages: int, last_page_len: int, page_size: int) -> int:
    return last_page_len if page == num_pages - 1 else page_size


def _finish(chosen: dict[int, Reason], num_pages: int, last_page_len: int, page_size: int,
            context_tokens: int, budget: int | None, all_pages: bool,
            retrieval: RetrieveResult | None) -> AttendPlan:
    pages = tuple(sorted(chosen))
    ranked = "retrieved" in chosen.values() or "neighbor" in chosen.values()
    method = (retrieval.method if retrieval is not None else "given") if ranked else "none"
    return AttendPlan(
        pages=pages,
        reasons=tuple(chosen[p] for p in pages),
        attended_tokens=sum(_page_tokens(p, num_pages, last_page_len, page_size) for p in pages),
        context_tokens=context_tokens,
        budget_tokens=budget,
        all_pages=all_pages,
        method=method,
        retrieval=retrieval,
    )


def _first_recent_page(context: int, num_pages: int, budget: int | None, policy: SelectionPolicy) -> int:
    """First page of the recent window: the pages holding the last ``recent_tokens`` tokens, rounded
    out to whole pages; under a tight budget, rounded to the nearer page boundary instead.

    Why: when the document's last page is partial, a 256-token window starts inside the page before
    it, and rounding out buys that whole page for the few tokens of it inside the window. At 5% of
    32K (1,639 tokens) the sink page and a two-page window take 512 + the last page's tokens, and
    the budget holds 3 retrieved pages instead of 4; every rank counts there. Under a tight budget
    the window's first page is kept only when at least half of it lies inside the window, so the
    window still holds at least ``recent_tokens - page_size / 2`` tokens (and always the last page).
    """
    P = policy.page_size_tokens
    start = max(0, context - policy.recent_tokens)
    first = start // P
    if budget is None or policy.tight_budget_pages == 0 or first >= num_pages - 1:
        return first
    outward = sum(min(P, context - p * P) for p in range(first, num_pages))
    free = budget - min(policy.sink_pages, first) * P - outward
    inside_first = (first + 1) * P - start  # window tokens on its first page
    if free < policy.tight_budget_pages * P and 2 * inside_first < P:
        return first + 1
    return first


def plan_from_ranking(
    ranked_pages: Sequence[int],
    num_pages: int,
    last_page_len: int,
    policy: SelectionPolicy,
    retrieval: RetrieveResult | None = None,
    companions: Mapping[int, Sequence[int]] | None = None,
) -> AttendPlan:
    """Build a plan from pages already ranked best-first (any source: embeddings, Quest, fused).

    ``companions``: per ranked page, other pages its evidence runs onto; each is added (as a
    ``neighbor``) right after its page when the budget allows, before lower-ranked pages."""
    P = policy.page_size_tokens
    if num_pages <= 0:
        raise ValueError(f"num_pages must be positive, got {num_pages}")
    if not 1 <= last_page_len <= P:
        raise ValueError(f"last_page_len must be in 1..{P}, got {last_page_len}")
    context = (num_pages - 1) * P + last_page_len
    budget = policy.budget_for(context)
    size = lambda p: _page_tokens(p, num_pages, last_page_len, P)  # noqa: E731

    chosen: dict[int, Reason] = {}
    for p in range(min(policy.sink_pages, num_pages)):
        chosen[p] = "sink"
    if policy.recent_tokens > 0:
        first_recent = _first_recent_page(context, num_pages, budget, policy)
        for p in range(first_recent, num_pages):
            chosen.setdefault(p, "recent")

    if budget is not None and (budget >= context or len(chosen) == num_pages):
        for p in range(num_pages):
            chosen.setdefault(p, "all")
        return _finish(chosen, num_pages, last_page_len, P, context, budget, True, retrieval)
    if budget is not None and budget < policy.mandatory_tokens:
        raise ValueError(
            f"budget of {budget} tokens ({policy.budget_fraction} of {context}) is below the mandatory "
            f"sink_pages*page_size_tokens + recent_tokens = {policy.mandatory_tokens}"
        )

    used = sum(size(p) for p in chosen)
    retrieved = 0
    for page in ranked_pages:
        page = int(page)
        if page < 0 or page >= num_pages:
            continue
        if budget is None and retrieved >= (policy.top_k_pages or 0):
            break
        if page in chosen:
            continue
        if budget is not None and used + size(page) > budget:
            break
        chosen[page] = "retrieved"
        used += size(page)
        retrieved += 1
        for nb in (companions or {}).get(page, ()):
            if 0 <= nb < num_pages and nb not in chosen and (budget is None or used + size(nb) <= budget):
                chosen[nb] = "neighbor"
                used += size(nb)
        # Nearest neighbours first, so a tight budget keeps the closest context.
        for d in range(1, policy.neighbor_pages + 1):
            for nb in (page + d, page - d):
                if 0 <= nb < num_pages and nb not in chosen:
                    if budget is not None and used + size(nb) > budget:
                        continue
                    chosen[nb] = "neighbor"
                    used += size(nb)
    return _finish(chosen, num_pages, last_page_len, P, context, budget, False, retrieval)


def plan(
    query: str,
    index: PageRetriever,
    num_pages: int,
    last_page_len: int,
    policy: SelectionPolicy,
    scope: tuple[int, int] | None = None,
) -> AttendPlan:
    """Retrieve pages for ``query`` from ``index`` and build the plan.

    ``scope``: a char range ``(start, end)`` to retrieve from (one document of a case file);
    the index must take ``retrieve(..., scope=)`` (:class:`.DocumentIndex` does). Pages outside
    it are not retrieved; sink and recent pages are added as always.

    Budget semantics: sink and recent pages always come first; retrieved pages
    (and their neighbours) are then added in rank order while the total stays
    within the budget. Because the recent window is rounded out to whole pages,
    the mandatory pages alone can exceed a budget equal to
    ``mandatory_tokens`` by less than one page. Under a tight budget (fewer than
    ``tight_budget_pages`` free pages) the window is rounded to the nearer page
    boundary instead, so it holds at least ``recent_tokens - page_size_tokens / 2``
    tokens and always the last page.

    Raises:
        ValueError: empty query, or a budget below the mandatory pages.
    """
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query is empty; a plan needs text to retrieve with")
    P = policy.page_size_tokens
    context = (num_pages - 1) * P + last_page_len
    budget = policy.budget_for(context)
    mandatory = min(num_pages, policy.sink_pages + math.ceil(policy.recent_tokens / P) + 1)
    if budget is None:
        k = (policy.top_k_pages or 0) + mandatory
    elif budget >= context:
        return plan_from_ranking([], num_pages, last_page_len, policy)
    else:
        k = math.ceil(budget / P) + mandatory
    k = min(num_pages, k)
    kw = {} if scope is None else {"scope": (int(scope[0]), int(scope[1]))}
    result = index.retrieve(query, k, method=policy.method, **kw) if k > 0 else None
    ranked = _ranking(index, result, policy)
    out = plan_from_ranking(ranked, num_pages, last_page_len, policy, result, _companions(index, result, policy))
    # Neighbours can already hold ranked pages, leaving the budget unfilled;
    # then rank the whole document once more (rare, and bounded).
    short = (budget is not None and out.attended_tokens + P <= budget) or (
        budget is None and len(out.pages_with("retrieved")) < (policy.top_k_pages or 0)
    )
    if short and k < num_pages:
        result = index.retrieve(query, num_pages, method=policy.method, **kw)
        out = plan_from_ranking(_ranking(index, result, policy), num_pages, last_page_len, policy, result,
                                _companions(index, result, policy))
    return out


_NON_WORD = re.compile(r"[\W_]+")


def _ranking(index: PageRetriever, result: RetrieveResult | None, policy: SelectionPolicy) -> list[int]:
    """The pages to fill the budget with, best first: the retrieval order, except that a page whose
    evidence text repeats a higher-ranked page's (another passage with the same words, compared
    without case, spacing or punctuation) moves after all pages with new evidence.

    Why: filler and case files hold several copies of the same licence or boilerplate clause (a
    BSD disclaimer three times, an MIT grant four times). Each copy scores the same, so one
    sentence that matches the question takes several of the 3-5 pages a 5% budget holds at 32K;
    the model learns nothing from the second copy that the first did not give it. A page whose
    evidence is the *same* passage as a higher page's (one sentence across a page boundary) is
    not a repeat: it is that passage's other half, and stays where it ranks."""
    if result is None:
        return []
    pages = result.pages.tolist()
    text = getattr(index, "text", None)
    if not policy.demote_repeats or text is None or len(result.evidence) != len(pages):
        return pages
    seen: dict[str, tuple[int, int]] = {}
    fresh, repeats = [], []
    for page, span in zip(pages, result.evidence):
        key = _NON_WORD.sub(" ", text[span[0]:span[1]]).strip().lower()
        first = seen.setdefault(key, span)
        (fresh if first == span or not key else repeats).append(page)
    return fresh + repeats


def _companions(index: PageRetriever, result: RetrieveResult | None,
                policy: SelectionPolicy) -> dict[int, list[int]] | None:
    """Per ranked page, the other pages its evidence passage touches (an index that can map
    chars to pages, ``span_pages``, is needed; otherwise none)."""
    span_pages = getattr(index, "span_pages", None)
    if result is None or span_pages is None or not result.evidence or not policy.evidence_pages:
        return None
    out = {}
    for page, (a, b) in zip(result.pages.tolist(), result.evidence):
        others = [p for p in span_pages(a, b) if p != page]
        if others:
            out[page] = sorted(others, key=lambda p: abs(p - page))
    return out
