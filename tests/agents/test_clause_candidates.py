"""Which pages the clause extractor draws its candidate sentences from."""

from __future__ import annotations

from agentctx.agents.roles import _quote_source, clause_candidate_pages
from agentctx.retrieval.policy import SelectionPolicy, plan_from_ranking


def _plan(ranked, sink_pages=1, num_pages=40):
    policy = SelectionPolicy(page_size_tokens=16, sink_pages=sink_pages, top_k_pages=4, recent_tokens=16,
                             neighbor_pages=0)
    return plan_from_ranking(ranked, num_pages, 16, policy)


def test_sink_pages_are_candidates_even_when_retrieval_does_not_rank_them():
    plan = _plan([12, 7, 30, 21])
    assert 0 not in _quote_source(plan)  # what the extractor read before
    assert clause_candidate_pages(plan) == [0, 7, 12, 21, 30]


def test_no_duplicate_when_a_sink_page_is_ranked_and_no_sink_without_sink_pages():
    assert clause_candidate_pages(_plan([0, 5, 9], sink_pages=2)) == [0, 1, 5, 9]
    assert clause_candidate_pages(_plan([12, 7], sink_pages=0)) == [7, 12]
