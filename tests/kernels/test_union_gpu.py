"""The Triton union page kernel on CUDA vs the plain-PyTorch reference and float64 (cases and
tolerances in _union_cases; the CPU interpreter runs the small ones in test_triton_interpret)."""

from __future__ import annotations

import pytest

from ._marks import GPU_TRITON
from ._union_cases import run_union_case, union_cases

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(union_cases(small=False)))
def test_triton_union_matches_reference(name):
    run_union_case(union_cases(small=False)[name], device="cuda")
