"""The Triton union kernel over quantised pages on CUDA: against the reference on the same pages and
against float pages (cases and bounds in _union_quant_cases; the interpreter runs the small ones
in test_union_quant.py; the float cases stay in test_union_gpu.py)."""

from __future__ import annotations

import pytest

from ._marks import GPU_TRITON
from ._union_quant_cases import run_union_quant_case, union_quant_cases

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(union_quant_cases(small=False)))
def test_triton_union_on_quantised_pages_matches_reference(name):
    run_union_quant_case(union_quant_cases(small=False)[name], device="cuda")
