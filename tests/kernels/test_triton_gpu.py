"""The Triton kernels on a CUDA GPU against the reference (marked `gpu`; skips without CUDA/triton)."""

from __future__ import annotations

import pytest
import torch

from agentctx.kernels import attend_selected

from ._cases import assert_close_attention, make_case
from ._marks import GPU_TRITON
from ._triton_grid import gpu_cases, run_case

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(gpu_cases()))
def test_triton_matches_reference(name):
    run_case(gpu_cases()[name], device="cuda")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_auto_dispatch_on_cuda(dtype):
    """impl='auto' on CUDA (flash if it fits, else Triton) agrees with the torch path."""
    case = make_case(B=3, Tq=1, Hq=8, Hkv=2, D=128, P=256, dtype=dtype, pages=[4, 0, 2], ragged="last",
                     seed=3, device="cuda")
    got = attend_selected(*case.args(), impl="auto")
    ref = attend_selected(*case.args(), impl="torch")
    assert_close_attention(*got, *ref, dtype)


def test_triton_is_cuda_graph_capturable():
    """No host syncs on the Triton path: capture once, replay with new block tables."""
    case = make_case(B=2, Tq=1, Hq=4, Hkv=1, D=256, P=256, dtype=torch.bfloat16, pages=[6, 3], seed=4,
                     device="cuda")
    args = list(case.args())
    attend_selected(*args, impl="triton")  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = attend_selected(*args, impl="triton")
    case.block_table[0, :3] = case.block_table[0, 3:6].clone()
    case.num_blocks[0] = 3
    graph.replay()
    torch.cuda.synchronize()
    ref = attend_selected(*case.args(), impl="torch")
    assert_close_attention(out, lse, *ref, torch.bfloat16)
