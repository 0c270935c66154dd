"""The QA agent's quote choice: candidates from retrieval's evidence, a hand-checked pick rule."""

import numpy as np
import pytest

from agentctx.agents.answering import choose_quote, quote_candidates, standardise
from agentctx.retrieval.hierarchical import RetrieveResult
from agentctx.retrieval.policy import AttendPlan


def _plan(evidence):
    r = RetrieveResult(pages=np.arange(len(evidence), dtype=np.int64), scores=np.zeros(len(evidence), np.float32),
                       mode="flat", search_seconds=0.0, method="hybrid", evidence=tuple(evidence))
    return AttendPlan(pages=(0,), reasons=("sink",), attended_tokens=1, context_tokens=10, method="hybrid",
                      retrieval=r)


def test_candidates_are_distinct_nonempty_spans_in_rank_order():
    plan = _plan([(10, 20), (30, 40), (10, 20), (50, 50), (60, 70), (80, 90), (95, 99)])
    assert quote_candidates(plan, 4) == [(10, 20), (30, 40), (60, 70), (80, 90)]
    assert quote_candidates(None) == []
    assert quote_candidates(_plan([])) == []


def test_standardise_by_hand():
    assert standardise([1.0, 3.0]) == [-1.0, 1.0]
    assert standardise([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert standardise([5.0]) == [0.0]


def test_the_pick_weighs_the_models_scores_against_the_rank_prior():
    # z of [-3, -1, -2] is [-1.2247, 1.2247, 0]; totals with prior 0.5, weight 1: [-1.22, 0.72, -1.0]
    pick, total = choose_quote([-3.0, -1.0, -2.0], weight=1.0, prior=0.5)
    assert pick == 1
    assert total == pytest.approx([-1.2247449, 0.7247449, -1.0])
    # A prior large enough keeps retrieval's first candidate; weight 0 always does.
    assert choose_quote([-3.0, -1.0, -2.0], weight=1.0, prior=3.0)[0] == 0
    assert choose_quote([-3.0, -1.0, -2.0], weight=0.0, prior=0.5)[0] == 0
