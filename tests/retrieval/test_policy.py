from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from agentctx.retrieval.hierarchical import RetrieveResult
from agentctx.retrieval.policy import AttendPlan, SelectionPolicy, plan, plan_from_ranking


class FakeRetriever:
    """Ranks pages in a fixed order; records the k it was asked for."""

    def __init__(self, ranking, num_pages):
        self.ranking = list(ranking)
        self.num_pages = num_pages
        self.asked: list[int] = []

    def retrieve(self, query, k, method="hybrid"):
        self.asked.append(k)
        pages = np.array(self.ranking[:k], dtype=np.int64)
        return RetrieveResult(pages, np.linspace(1, 0, len(pages)).astype(np.float32), "flat", 0.0)


P = 256


def test_defaults_and_extra_forbidden():
    pol = SelectionPolicy()
    assert (pol.sink_pages, pol.top_k_pages, pol.neighbor_pages, pol.recent_tokens, pol.page_size_tokens) == (
        1, 32, 0, 1024, 256)
    with pytest.raises(ValidationError):
        SelectionPolicy(top_k=3)  # unknown field
    assert SelectionPolicy.model_fields["recent_tokens"].description


def test_budget_validation_names_the_numbers():
    with pytest.raises(ValueError) as err:
        SelectionPolicy(budget_tokens=1000, top_k_pages=None)
    msg = str(err.value)
    assert "1000" in msg and "1280" in msg and "256" in msg and "1024" in msg
    with pytest.raises(ValueError):
        SelectionPolicy(budget_tokens=5000, budget_fraction=0.1, top_k_pages=None)
    with pytest.raises(ValueError):
        SelectionPolicy(budget_fraction=0.1, top_k_pages=8)  # explicit top-k plus a budget
    with pytest.raises(ValueError):
        SelectionPolicy(budget_fraction=1.5)
    assert SelectionPolicy(budget_fraction=0.1).has_budget  # default top_k yields to the budget
    # A fractional budget smaller than the mandatory pages fails at plan time, naming numbers.
    pol = SelectionPolicy(budget_fraction=0.05, top_k_pages=None)
    with pytest.raises(ValueError, match="1280"):
        plan_from_ranking([3], num_pages=40, last_page_len=P, policy=pol)


def test_top_k_plan_dedups_sorts_and_counts():
    pol = SelectionPolicy(top_k_pages=3, recent_tokens=300)
    # Last page holds 100 tokens -> context = 19*256+100; recent 300 tokens -> pages 18, 19.
    r = FakeRetriever([19, 7, 0, 7, 12, 3, 5], 20)
    p = plan("what is the fee?", r, 20, 100, pol)
    assert p.pages == (0, 3, 7, 12, 18, 19)  # sink 0, recent 18-19, three retrieved beyond them
    assert p.reasons == ("sink", "retrieved", "retrieved", "retrieved", "recent", "recent")
    assert p.attended_tokens == 5 * P + 100
    assert p.context_tokens == 19 * P + 100
    assert p.utilization == pytest.approx((5 * P + 100) / (19 * P + 100))
    assert p.reason_of(7) == "retrieved" and p.reason_of(8) is None
    assert not p.all_pages and p.budget_tokens is None


def test_neighbors_are_added_around_retrieved_pages():
    pol = SelectionPolicy(top_k_pages=2, neighbor_pages=1, recent_tokens=0, sink_pages=0)
    p = plan_from_ranking([5, 9], 10, P, pol)
    assert p.pages == (4, 5, 6, 8, 9)
    assert p.pages_with("neighbor") == (4, 6, 8)


def test_sink_pages_stay_sink_when_ranked_and_take_no_top_k_slot():
    def pol(sink_pages):
        return SelectionPolicy(page_size_tokens=16, sink_pages=sink_pages, top_k_pages=4, recent_tokens=16,
                               neighbor_pages=0)

    p = plan_from_ranking([0, 5, 9, 14, 20, 25], 40, 16, pol(2))  # page 0 ranked first, yet a sink page
    assert p.pages == (0, 1, 5, 9, 14, 20, 39)
    assert p.reasons == ("sink", "sink", "retrieved", "retrieved", "retrieved", "retrieved", "recent")
    no_sink = plan_from_ranking([12, 7], 40, 16, pol(0))
    assert no_sink.pages_with("sink") == () and no_sink.pages_with("retrieved") == (7, 12)


def test_budget_fills_by_rank_until_met():
    pol = SelectionPolicy(budget_tokens=6 * P, top_k_pages=None, recent_tokens=P)
    r = FakeRetriever([30, 10, 20, 11, 12, 13, 14], 40)
    p = plan("q", r, 40, P, pol)
    # sink 0 + recent 39 + four retrieved = six pages = the budget
    assert p.pages == (0, 10, 11, 20, 30, 39)
    assert p.attended_tokens == 6 * P <= p.budget_tokens
    frac = SelectionPolicy(budget_fraction=0.25, top_k_pages=None, recent_tokens=P)
    p2 = plan("q", FakeRetriever(list(range(39, -1, -1)), 40), 40, P, frac)
    assert p2.attended_tokens <= 0.25 * 40 * P
    assert p2.attended_tokens > 0.25 * 40 * P - P  # filled to within one page


def test_budget_with_neighbors_stays_within_budget():
    pol = SelectionPolicy(budget_tokens=5 * P, top_k_pages=None, neighbor_pages=1, recent_tokens=0, sink_pages=1)
    p = plan_from_ranking([10, 30, 20], 40, P, pol)
    assert p.attended_tokens <= 5 * P
    assert p.pages == (0, 9, 10, 11, 30)


def test_budget_covering_document_means_all_pages():
    pol = SelectionPolicy(budget_tokens=100_000, top_k_pages=None)
    r = FakeRetriever([], 12)
    p = plan("anything", r, 12, 17, pol)
    assert p.all_pages and p.pages == tuple(range(12))
    assert p.utilization == 1.0 and r.asked == []  # no retrieval needed
    p2 = plan_from_ranking([], 3, P, SelectionPolicy(budget_fraction=1.0, top_k_pages=None))
    assert p2.all_pages


def test_empty_query_and_bad_shapes():
    r = FakeRetriever([1], 4)
    for q in ("", "   \n"):
        with pytest.raises(ValueError, match="empty"):
            plan(q, r, 4, P, SelectionPolicy())
    with pytest.raises(ValueError):
        plan_from_ranking([], 4, 0, SelectionPolicy())
    with pytest.raises(ValueError):
        plan_from_ranking([], 0, 1, SelectionPolicy())


def test_plan_is_frozen():
    p = plan_from_ranking([2], 4, P, SelectionPolicy(top_k_pages=1, recent_tokens=0))
    assert isinstance(p, AttendPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.pages = ()  # type: ignore[misc]
