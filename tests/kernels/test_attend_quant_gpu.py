"""The quantised page kernel (kernels/triton_attend_quant.py) on CUDA: fp8 and int8 pools against
the reference at Gemma 3 270M and Llama 3 8B shapes (marked `gpu`; skips without CUDA/triton).
The small cases also run in the CPU interpreter (test_attend_quant.py)."""

from __future__ import annotations

import pytest
import torch

from agentctx.kernels import attend_selected
from agentctx.kernels.attend_selected import attend_selected_quant
from agentctx.kernels.kv_quant import quantize_pages

from ._marks import GPU_TRITON
from ._quant_cases import quant_cases, run_quant_case

pytestmark = GPU_TRITON


@pytest.mark.parametrize("name", list(quant_cases(small=False)))
def test_triton_quant_matches_reference(name):
    run_quant_case(quant_cases(small=False)[name], device="cuda")


@pytest.mark.parametrize("shape", [(4, 1, 256), (32, 8, 128)], ids=["gemma3-270m", "llama3-8b"])
def test_quant_kernel_near_bf16_kernel_with_outlier_keys(shape):
    """Every page of 16K tokens selected, keys with a 20x outlier channel, 2 rows of 8 query tokens:
    the fp8/int8 kernels within 6 % / 4 % (relative RMS) of the bf16 kernel over the unquantised
    pools (the float32 reference on CPU: at most 4.2 % / 2.3 % over six seeds)."""
    Hq, Hkv, D = shape
    S, P = 64, 256
    g = torch.Generator(device="cuda").manual_seed(0)
    k = torch.randn(S, P, Hkv, D, device="cuda", generator=g)
    v = torch.randn(S, P, Hkv, D, device="cuda", generator=g)
    k[:, :, torch.arange(Hkv), torch.randint(0, D, (Hkv,), device="cuda", generator=g)] *= 20.0
    q = torch.randn(2, 8, Hq, D, device="cuda", generator=g).bfloat16()
    bt = torch.arange(S, dtype=torch.int32, device="cuda")[None].expand(2, S).contiguous()
    nb = torch.full((2,), S, dtype=torch.int32, device="cuda")
    lens = torch.full((S,), P, dtype=torch.int32, device="cuda")
    want = attend_selected(q, k.bfloat16(), v.bfloat16(), bt, nb, lens, D**-0.5, impl="triton")[0].float()
    for kv, bound in (("fp8", 0.06), ("int8", 0.04)):
        kq, vq = quantize_pages(k, kv, part="k"), quantize_pages(v, kv, part="v")
        got = attend_selected_quant(q, kq, vq, bt, nb, lens, D**-0.5, impl="triton")[0].float()
        err = float((got - want).norm() / want.norm())
        assert err < bound, (kv, err)


def test_quant_triton_is_cuda_graph_capturable():
    """No host syncs: capture once, replay with a new block table."""
    from ._cases import make_case

    case = make_case(B=2, Tq=1, Hq=4, Hkv=1, D=256, P=256, dtype=torch.float32, pages=[6, 3], seed=4)
    k = quantize_pages(case.k_pages, "fp8", part="k", slot_lens=case.slot_lens)
    v = quantize_pages(case.v_pages, "fp8", part="v", slot_lens=case.slot_lens)
    k, v = (type(p)(p.data.cuda(), p.scale.cuda()) for p in (k, v))
    q = case.q.bfloat16().cuda()
    bt, nb, lens = case.block_table.cuda(), case.num_blocks.cuda(), case.slot_lens.cuda()
    attend_selected_quant(q, k, v, bt, nb, lens, case.scale, impl="triton")  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = attend_selected_quant(q, k, v, bt, nb, lens, case.scale, impl="triton")
    bt[0, :3] = bt[0, 3:6].clone()
    nb[0] = 3
    graph.replay()
    torch.cuda.synchronize()
    ref = attend_selected_quant(q, k, v, bt, nb, lens, case.scale, impl="reference")
    torch.testing.assert_close(out.float(), ref[0].float(), atol=1e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref[1], atol=1e-3, rtol=1e-4)
