"""The decode step's small kernels on CUDA (kernels/act_mul.py, kernels/slot_write.py) vs their torch
references, and inside a captured CUDA graph (the batched decode rows replay them)."""

from __future__ import annotations

import pytest
import torch

from ._marks import GPU_TRITON
from ._step_cases import (
    act_mul_cases,
    add_norm_cases,
    run_act_mul_case,
    run_add_norm_case,
    run_slot_write_case,
    slot_write_cases,
)

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(act_mul_cases()))
def test_triton_act_mul_matches_reference(name):
    run_act_mul_case(act_mul_cases()[name], device="cuda")


@pytest.mark.parametrize("name", list(slot_write_cases()))
def test_triton_slot_write_equals_index_copy(name):
    run_slot_write_case(slot_write_cases()[name], device="cuda")


@pytest.mark.parametrize("name", list(add_norm_cases()))
def test_triton_add_norm_matches_reference(name):
    run_add_norm_case(add_norm_cases()[name], device="cuda")


def test_step_kernels_are_capturable():
    from agentctx.kernels.act_mul import act_mul, act_mul_reference
    from agentctx.kernels.slot_write import write_slots

    gu = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    buf_k, buf_v = (torch.zeros(64, 1, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(4, 1, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    dst = torch.tensor([3, 17, 33, 60], device="cuda")
    act_mul(gu, "gelu_tanh", impl="triton")  # compile outside the capture
    write_slots(buf_k, buf_v, dst, k, v, impl="triton")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = act_mul(gu, "gelu_tanh", impl="triton")
        write_slots(buf_k, buf_v, dst, k, v, impl="triton")
    gu.copy_(torch.randn_like(gu))
    k.copy_(torch.randn_like(k))
    buf_k.zero_()
    graph.replay()
    torch.testing.assert_close(out, act_mul_reference(gu, "gelu_tanh"), atol=3e-2, rtol=1.6e-2)
    assert torch.equal(buf_k[dst], k)
