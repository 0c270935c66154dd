"""The Triton tail-attention-and-merge kernel on CUDA vs the torch path (tolerances in _tail_cases)."""

from __future__ import annotations

import pytest

from ._marks import GPU_TRITON
from ._tail_cases import run_tail_case, tail_cases

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(tail_cases(small=False)))
def test_triton_tail_matches_reference(name):
    run_tail_case(tail_cases(small=False)[name], device="cuda")
