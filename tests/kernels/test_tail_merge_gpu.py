"""The Triton tail-attention-and-merge kernel on CUDA vs the torch path (tolerances in _tail_cases)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from ._tail_cases import run_tail_case, tail_cases

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]


@pytest.mark.parametrize("name", list(tail_cases(small=False)))
def test_triton_tail_matches_reference(name):
    run_tail_case(tail_cases(small=False)[name], device="cuda")
