"""The Triton RoPE kernel on CUDA vs float64 RoPE (tolerances in _rope_cases), and in a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from ._marks import GPU_TRITON
from ._rope_cases import make_rope_inputs, rope_cases, run_rope_case

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(rope_cases()))
def test_triton_rope_matches_float64(name):
    run_rope_case(rope_cases()[name], device="cuda")


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_triton_rope_is_capturable(dtype):
    from agentctx.kernels.rope import apply_rope, apply_rope_reference

    spec = dict(dtype=dtype, Hq=4, Hkv=1, D=256, B=1, T=7, seed=3)
    q, k, cos, sin = make_rope_inputs(spec, "cuda")
    apply_rope(q, k, cos, sin, impl="triton")  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q_out, k_out = apply_rope(q, k, cos, sin, impl="triton")
    # New inputs in the captured buffers: the replay must read them, not what capture saw.
    q2, k2, cos2, sin2 = make_rope_inputs(dict(spec, seed=4), "cuda")
    for dst, src in ((q, q2), (k, k2), (cos, cos2), (sin, sin2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    tol = dict(atol=3e-2, rtol=1.6e-2) if dtype == "bf16" else dict(atol=1e-5, rtol=1e-5)
    for got, want in zip((q_out, k_out), apply_rope_reference(q, k, cos, sin)):
        torch.testing.assert_close(got, want, **tol)
