"""kernels.rmsnorm: the torch reference equals transformers' norm modules; bad input is refused.

The Triton kernel is checked against this reference by the interpreter grid
(test_triton_interpret.py) and on a GPU (test_rmsnorm_gpu.py).
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from agentctx.kernels.rmsnorm import rms_norm, rms_norm_reference


def _module(cls, d, dtype):
    m = cls(d, eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(torch.randn(d, generator=torch.Generator().manual_seed(3)) * 0.5)
    return m.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls,style", [(Gemma3RMSNorm, "offset"), (LlamaRMSNorm, "scale"), (Qwen3RMSNorm, "scale")])
def test_reference_equals_transformers_bit_for_bit(cls, style, dtype):
    m = _module(cls, 96, dtype)
    x = (torch.randn(2, 5, 96, generator=torch.Generator().manual_seed(4)) * 4).to(dtype)
    with torch.no_grad():
        want = m(x)
    got = rms_norm_reference(x, m.weight.detach(), 1e-6, style)
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
    # The other convention is really different (the probe in serving.fusions.norms relies on it).
    other = "scale" if style == "offset" else "offset"
    assert not torch.equal(rms_norm_reference(x, m.weight.detach(), 1e-6, other), want)


def test_cpu_auto_uses_the_reference():
    x, w = torch.randn(3, 16), torch.randn(16)
    assert torch.equal(rms_norm(x, w, 1e-6, "scale"), rms_norm_reference(x, w, 1e-6, "scale"))


@pytest.mark.parametrize(
    "x,w,style,impl,match",
    [
        (torch.randn(3, 16), torch.randn(16), "gemma", "auto", "style must be"),
        (torch.randn(3, 16), torch.randn(8), "scale", "auto", "weight must be"),
        (torch.randn(3, 16), torch.randn(2, 8), "scale", "auto", "weight must be"),
        (torch.ones(3, 16, dtype=torch.int64), torch.randn(16), "scale", "torch", "floating point"),
        (torch.randn(3, 16), torch.randn(16), "scale", "cuda", "impl must be"),
    ],
)
def test_bad_input_is_refused(x, w, style, impl, match):
    with pytest.raises(ValueError, match=match):
        rms_norm(x, w, 1e-6, style, impl=impl)


def test_negative_eps_is_refused():
    with pytest.raises(ValueError, match="eps"):
        rms_norm_reference(torch.randn(2, 4), torch.randn(4), -1.0, "scale")
