"""The Triton RMSNorm kernel on CUDA vs the torch reference (tolerance per dtype in _rmsnorm_cases)."""

from __future__ import annotations

import pytest
import torch

from ._marks import GPU_TRITON
from ._rmsnorm_cases import rmsnorm_cases, run_rmsnorm_case

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(rmsnorm_cases()))
def test_triton_rmsnorm_matches_reference(name):
    run_rmsnorm_case(rmsnorm_cases()[name], device="cuda")


def test_triton_rmsnorm_is_capturable():
    from agentctx.kernels.rmsnorm import rms_norm, rms_norm_reference

    x = torch.randn(8, 640, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(640, device="cuda", dtype=torch.bfloat16)
    rms_norm(x, w, 1e-6, "offset", impl="triton")  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rms_norm(x, w, 1e-6, "offset", impl="triton")
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(out, rms_norm_reference(x, w, 1e-6, "offset"), atol=3e-2, rtol=1.6e-2)
