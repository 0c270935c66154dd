"""The pick rules of bench/clause_pick.py on hand-made records (no model)."""

from __future__ import annotations

from bench.clause_pick import _seeds, accuracy, oracle, rules


def _rec(sims, llm, correct, seed=1):
    return {"seed": seed, "kind": "term", "sims": sims, "llm": llm, "correct": correct}


def test_rules_pick_by_similarity_llm_or_both():
    r = rules()
    # Similarity-sorted shortlist: the LLM prefers the third, embedding the first.
    rec = _rec([0.9, 0.8, 0.7], [-3.0, -2.0, -1.0], [False, False, True])
    assert r["embedding"](rec["sims"], rec["llm"]) == 0
    assert r["llm@2"](rec["sims"], rec["llm"]) == 1  # the third is outside a shortlist of 2
    assert r["llm@3"](rec["sims"], rec["llm"]) == 2
    # A heavy similarity weight brings the combined rule back to the head of the shortlist.
    assert r["z@3,w=2.0"](rec["sims"], [-1.1, -1.2, -1.0]) == 0
    assert accuracy([rec], r["llm@3"]) == 1.0 and accuracy([rec], r["embedding"]) == 0.0
    assert oracle([rec], 2) == 0.0 and oracle([rec], 3) == 1.0


def test_no_candidates_counts_as_a_miss():
    r = rules()
    empty = _rec([], [], [])
    assert all(f([], []) is None for f in r.values())
    assert accuracy([empty, _rec([0.5], [-1.0], [True])], r["embedding"]) == 0.5


def test_seed_ranges():
    assert _seeds("1-3,7") == [1, 2, 3, 7]
