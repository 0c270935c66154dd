"""pick_token: each sampling parameter does what it says, and defaults change nothing."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.engine.reference_sampling import apply_penalties, filter_probs, pick_token
from agentctx.serving.types import SamplingParams

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0])


def _draws(params: SamplingParams, n: int = 400, temperature: float = 1.0, history=()) -> set[int]:
    g = torch.Generator().manual_seed(0)
    return {pick_token(LOGITS, temperature, params, history, g) for _ in range(n)}


def test_defaults_are_argmax_and_plain_sampling():
    assert pick_token(LOGITS, 0.0, SamplingParams()) == 0
    assert pick_token(LOGITS, 0.0, None) == 0
    assert _draws(SamplingParams()) == {0, 1, 2, 3, 4}  # every token is drawn at temperature 1


def test_top_p_top_k_min_p_restrict_the_draw():
    assert _draws(SamplingParams(top_p=0.01)) == {0}  # the issue: top_p 0.01 at temperature 1 is greedy
    assert _draws(SamplingParams(top_p=0.0)) == {0}
    # probs ~ [.43, .26, .16, .06, .02]: the nucleus of 0.6 holds the first two
    assert _draws(SamplingParams(top_p=0.6)) == {0, 1}
    assert _draws(SamplingParams(top_k=1)) == {0}
    assert _draws(SamplingParams(top_k=3)) == {0, 1, 2}
    assert _draws(SamplingParams(min_p=0.5)) == {0, 1}  # 0.26 >= 0.5 * 0.43 > 0.16


def test_a_row_shaped_1_by_v_samples_as_its_vector():
    g = torch.Generator().manual_seed(0)
    row = LOGITS[None, :]  # what a forward returns for one position
    assert {pick_token(row, 1.0, SamplingParams(top_p=0.01), (), g) for _ in range(100)} == {0}
    assert {pick_token(row, 1.0, SamplingParams(top_k=2), (), g) for _ in range(200)} == {0, 1}


def test_penalties_follow_openai_formula():
    p = SamplingParams(presence_penalty=0.75, frequency_penalty=0.25)
    out = apply_penalties(LOGITS, p, [0, 0, 2])
    expected = LOGITS.clone()
    expected[0] -= 0.75 + 2 * 0.25
    expected[2] -= 0.75 + 1 * 0.25
    assert torch.allclose(out, expected)
    # greedy over penalised logits: token 0 repeated loses to token 1
    assert pick_token(LOGITS, 0.0, SamplingParams(presence_penalty=1.0), history=[0]) == 1
    # a subset of the vocabulary (a constrained step): ids map history onto positions
    sub = torch.tensor([1.0, 0.9])
    assert pick_token(sub, 0.0, SamplingParams(frequency_penalty=1.0), history=[7], ids=[7, 9]) == 1
    # negative penalties encourage repetition
    assert pick_token(LOGITS, 0.0, SamplingParams(presence_penalty=-2.5), history=[3]) == 3


def test_filter_keeps_the_most_likely_token_and_validation():
    probs = torch.softmax(LOGITS, -1)
    assert filter_probs(probs, SamplingParams(top_p=1e-9, top_k=1, min_p=1.0))[0] > 0
    for bad in ({"top_p": 1.5}, {"top_k": -1}, {"min_p": 2.0}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
