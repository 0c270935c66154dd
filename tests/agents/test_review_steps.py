"""The review's plan for short documents under a fractional budget (no cluster needed)."""

from __future__ import annotations

from types import SimpleNamespace

from agentctx.agents.review_steps import plan_for
from agentctx.retrieval.policy import SelectionPolicy


class _Ctx:
    def __init__(self, num_tokens: int, policy: SelectionPolicy):
        self.info = SimpleNamespace(num_tokens=num_tokens)
        self.policy = policy
        self.asked = []

    def plan(self, query, policy):
        self.asked.append(policy)
        return policy


def test_a_budget_too_small_for_the_mandatory_pages_reads_them_plus_the_best_page():
    policy = SelectionPolicy(budget_fraction=0.12, top_k_pages=None, recent_tokens=256)
    short = _Ctx(2325, policy)  # 12% = 279 tokens < sink page 256 + recent 256 (+ a page)
    got = plan_for(short, "governing law")
    assert got.budget_fraction is None and got.top_k_pages == 1
    long = _Ctx(40_000, policy)  # 12% = 4,800 tokens: the budget stands
    assert plan_for(long, "governing law") is policy
    topk = SelectionPolicy(top_k_pages=8, recent_tokens=256)
    assert plan_for(_Ctx(2325, topk), "q") is topk
