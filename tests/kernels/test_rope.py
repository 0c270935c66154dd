"""kernels.rope: the torch reference equals transformers' apply_rotary_pos_emb; bad input is
refused; the Triton kernel matches float64 RoPE under Triton's CPU interpreter.

The interpreter grid runs once in a subprocess (TRITON_INTERPRET must be set before the
kernels are imported and must not leak into GPU tests of this process) and each case is
reported as its own test. The same grid runs compiled in test_rope_gpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

from agentctx.kernels.rope import apply_rope, apply_rope_reference

from ._rope_cases import make_rope_inputs, rope_cases

_REPO = Path(__file__).resolve().parents[2]
_HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("family", [modeling_gemma3, modeling_llama, modeling_qwen2, modeling_qwen3],
                         ids=lambda m: m.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("extra", [{}, {"shared_table": True}, {"layout": "bhtd"}], ids=["bthd", "shared", "bhtd"])
def test_reference_equals_transformers_bit_for_bit(family, dtype, extra):
    spec = dict(dtype=dtype, Hq=4, Hkv=2, D=64, B=2, T=5, seed=7, **extra)
    q, k, cos, sin = make_rope_inputs(spec, "cpu")
    want = family.apply_rotary_pos_emb(q, k, cos, sin)
    got = apply_rope_reference(q, k, cos, sin)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        assert torch.equal(g, w)


def test_cpu_auto_uses_the_reference():
    q, k, cos, sin = make_rope_inputs(dict(dtype="fp32", Hq=4, Hkv=1, D=32, B=1, T=3, seed=0), "cpu")
    for g, w in zip(apply_rope(q, k, cos, sin), apply_rope_reference(q, k, cos, sin)):
        assert torch.equal(g, w)


def _bad(**change):
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
    cos, sin = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    args = dict(q=q, k=k, cos=cos, sin=sin) | change
    return args["q"], args["k"], args["cos"], args["sin"]


@pytest.mark.parametrize(
    "args,impl,match",
    [
        (_bad(), "cuda", "impl must be"),
        (_bad(q=torch.randn(4, 3, 8)), "torch", r"must be \(B, H, T, D\)"),
        (_bad(k=torch.randn(1, 2, 5, 8)), "torch", "agree on B, T and D"),
        (_bad(k=torch.randn(2, 2, 3, 8)), "torch", "agree on B, T and D"),
        (_bad(q=torch.randn(1, 4, 3, 7), k=torch.randn(1, 2, 3, 7), cos=torch.randn(1, 3, 7), sin=torch.randn(1, 3, 7)),
         "torch", "must be even"),
        (_bad(cos=torch.randn(1, 3, 4)), "torch", "cos and sin must be"),
        (_bad(cos=torch.randn(3, 8), sin=torch.randn(3, 8)), "torch", "cos and sin must be"),
        (_bad(cos=torch.randn(2, 3, 8), sin=torch.randn(2, 3, 8)), "torch", "cos and sin must be"),
        (_bad(k=torch.randn(1, 2, 3, 8, dtype=torch.bfloat16)), "torch", "one floating dtype"),
        (_bad(cos=torch.randn(1, 3, 8, dtype=torch.float64)), "auto", "one floating dtype"),
        (_bad(q=torch.ones(1, 4, 3, 8, dtype=torch.int64), k=torch.ones(1, 2, 3, 8, dtype=torch.int64),
              cos=torch.ones(1, 3, 8, dtype=torch.int64), sin=torch.ones(1, 3, 8, dtype=torch.int64)),
         "torch", "one floating dtype"),
        (_bad(sin=torch.randn(1, 3, 8, device="meta")), "torch", "one device"),
    ],
)
def test_bad_input_is_refused(args, impl, match):
    with pytest.raises(ValueError, match=match):
        apply_rope(*args, impl=impl)


@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
def test_compiled_triton_refuses_cpu_tensors():
    from agentctx.kernels.triton_attend import INTERPRET

    if INTERPRET:
        pytest.skip("TRITON_INTERPRET=1 in this process: CPU tensors are allowed")
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        apply_rope(*_bad(), impl="triton")


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels._rope_cases"],
        cwd=_REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"interpreter run failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("name", list(rope_cases(small=True)))
def test_triton_interpreter_matches_float64(interpreter_results, name):
    result = interpreter_results.get(name, "missing from the interpreter run's output")
    assert result == "ok", result
