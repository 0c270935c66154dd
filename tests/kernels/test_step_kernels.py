"""kernels/act_mul.py and kernels/slot_write.py on CPU: the references are what they replace, the
activation probe tells the model families' activations apart, and bad input is refused. The
Triton kernels are checked against the references by the interpreter grid
(test_triton_interpret.py) and on a GPU (test_step_kernels_gpu.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers.activations import ACT2FN

from agentctx.kernels.act_mul import act_mul, act_mul_reference, activation_of
from agentctx.kernels.slot_write import write_slots


def test_reference_is_the_gated_mlp_middle():
    gu = torch.randn(3, 2 * 48, generator=torch.Generator().manual_seed(0))
    gate, up = gu[:, :48], gu[:, 48:]
    assert torch.equal(act_mul_reference(gu, "gelu_tanh"), F.gelu(gate, approximate="tanh") * up)
    assert torch.equal(act_mul_reference(gu, "silu"), F.silu(gate) * up)
    assert torch.equal(act_mul(gu, "silu"), act_mul_reference(gu, "silu"))  # CPU: auto is the reference


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_probe_names_the_families_activations(dtype):
    # What Gemma 3 (hidden_activation) and Llama / Qwen (hidden_act) configs name.
    assert activation_of(ACT2FN["gelu_pytorch_tanh"], "cpu", dtype) == "gelu_tanh"
    assert activation_of(ACT2FN["silu"], "cpu", dtype) == "silu"
    assert activation_of(nn.SiLU(), "cpu", dtype) == "silu"
    # Exact GELU, ReLU and a non-elementwise callable are none of them: the MLP keeps its act_fn.
    assert activation_of(ACT2FN["gelu"], "cpu", dtype) is None
    assert activation_of(torch.relu, "cpu", dtype) is None
    assert activation_of(lambda x: x.sum(), "cpu", dtype) is None


@pytest.mark.parametrize("gu,act,match", [
    (torch.randn(3, 7), "silu", "gate and up halves"),
    (torch.randn(3, 8), "gelu", "act must be"),
    (torch.ones(3, 8, dtype=torch.int64), "silu", "floating point"),
])
def test_act_mul_refuses_bad_input(gu, act, match):
    with pytest.raises(ValueError, match=match):
        act_mul(gu, act)


def test_write_slots_cpu_is_index_copy():
    g = torch.Generator().manual_seed(1)
    buf_k, buf_v = torch.zeros(10, 2, 8), torch.zeros(10, 2, 8)
    k, v = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    dst = torch.tensor([7, 0, 4])
    write_slots(buf_k, buf_v, dst, k, v)
    assert torch.equal(buf_k[dst], k) and torch.equal(buf_v[dst], v)
    assert buf_k[[1, 2, 3, 5, 6, 8, 9]].abs().sum() == 0


@pytest.mark.parametrize("args,match", [
    ((torch.zeros(10, 2, 8), torch.zeros(10, 2, 8), torch.tensor([1]), torch.zeros(2, 2, 8), torch.zeros(2, 2, 8)),
     "dst must be"),
    ((torch.zeros(10, 2, 8), torch.zeros(10, 2, 8), torch.tensor([1, 2]), torch.zeros(2, 1, 8), torch.zeros(2, 1, 8)),
     "does not fit"),
    ((torch.zeros(10, 2, 8), torch.zeros(10, 2, 8, dtype=torch.float16), torch.tensor([1, 2]), torch.zeros(2, 2, 8),
      torch.zeros(2, 2, 8)), "dtypes differ"),
    ((torch.zeros(10, 2, 8), torch.zeros(10, 2, 8), torch.tensor([1.0, 2.0]), torch.zeros(2, 2, 8),
      torch.zeros(2, 2, 8)), "int32/int64"),
])
def test_write_slots_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        write_slots(*args)


def test_slot_write_kernel_that_disagrees_falls_back_to_index_copy(monkeypatch, caplog):
    """A kernel whose first call writes wrong slots (or fails to compile) is replaced by index_copy_
    for the process, and its first call's result is corrected."""
    pytest.importorskip("triton")
    import agentctx.kernels.slot_write as sw
    import agentctx.kernels.triton_slot_write as tsw

    calls = []

    def wrong(flat_k, flat_v, dst, k, v):
        calls.append(1)
        flat_k.fill_(7.0)

    monkeypatch.setattr(tsw, "triton_write_slots", wrong)
    monkeypatch.setattr(sw, "_checked", {})
    g = torch.Generator().manual_seed(2)
    for _ in range(2):
        buf_k, buf_v = torch.zeros(10, 2, 8), torch.zeros(10, 2, 8)
        k, v = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
        dst = torch.tensor([7, 0, 4])
        sw._checked_kernel(buf_k, buf_v, dst, k, v)
        assert torch.equal(buf_k[dst], k) and torch.equal(buf_v[dst], v)
        assert buf_k[[1, 2, 3, 5, 6, 8, 9]].abs().sum() == 0
    assert calls == [1]  # checked once, then index_copy_ only
    assert "failed its first-call check" in caplog.text
