"""serving.fusions.rope: which attention modules get fused RoPE, and only while active.

On CPU the fused path runs the torch reference (impl="torch"), which equals transformers'
apply_rotary_pos_emb bit for bit, so logits must be identical; one test runs the Triton
kernel itself inside tiny models under Triton's CPU interpreter (in a subprocess). The
kernel's accuracy is checked in tests/kernels (interpreter and GPU).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.qwen3 import modeling_qwen3

from agentctx.serving.engine import LocalEngine
from agentctx.serving.fusions.rope import install_rope, rope_active
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint
from tests.serving.runner_compare import assert_runners_agree

_REPO = Path(__file__).resolve().parents[2]
_PY_MODULE = {"llama": modeling_llama, "qwen3": modeling_qwen3, "gemma3_text": modeling_gemma3}
# transformers' own functions, whatever another test installed before this module ran.
_ORIGINAL = {m: getattr(m.apply_rotary_pos_emb, "_agentctx_original", m.apply_rotary_pos_emb)
             for m in _PY_MODULE.values()}


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family_checkpoint(request, tmp_path_factory):
    return request.param, make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def family_model(family_checkpoint):
    family, path = family_checkpoint
    return family, load_model(path, dtype=torch.float32, device="cpu")


def _attention_names(model):
    return {n for n, m in model.named_modules() if type(m).__name__.endswith("Attention")}


def test_every_attention_module_is_fused(family_model):
    family, loaded = family_model
    py_module = _PY_MODULE[family]
    report = install_rope(loaded.model, impl="torch")
    assert set(report.fused) == _attention_names(loaded.model) and report.fused
    assert set(report.fused.values()) == {py_module.__name__}
    assert not report.skipped
    wrapper = py_module.apply_rotary_pos_emb
    assert wrapper is not _ORIGINAL[py_module] and wrapper.__wrapped__ is _ORIGINAL[py_module]
    again = install_rope(loaded.model, impl="torch")  # idempotent: no second wrapper
    assert again.fused == report.fused and py_module.apply_rotary_pos_emb is wrapper


def test_reinstall_with_another_impl_wraps_the_original(family_model):
    family, loaded = family_model
    py_module = _PY_MODULE[family]
    install_rope(loaded.model, impl="torch")
    # On CPU without the interpreter the Triton probe fails: skipped, and the patch stays as it was.
    report = install_rope(loaded.model, impl="triton")
    if report.fused:  # a GPU-less interpreter process or a CUDA model would fuse
        assert py_module.apply_rotary_pos_emb._agentctx_original is _ORIGINAL[py_module]
    else:
        assert set(report.skipped) == _attention_names(loaded.model)
        assert py_module.apply_rotary_pos_emb._agentctx_impl == "torch"
    install_rope(loaded.model, impl="torch")
    assert py_module.apply_rotary_pos_emb._agentctx_original is _ORIGINAL[py_module]


def test_fused_rope_runs_only_while_active(family_checkpoint, monkeypatch):
    _, path = family_checkpoint
    loaded = load_model(path, dtype=torch.float32, device="cpu")  # a model this test installs on first
    ids = torch.arange(4, 40).view(1, -1)
    with torch.no_grad():
        before = loaded.model(input_ids=ids).logits
    install_rope(loaded.model, impl="torch")
    calls = []
    import agentctx.kernels.rope as rope_mod

    real = rope_mod.apply_rope_reference
    monkeypatch.setattr(rope_mod, "apply_rope_reference", lambda *a, **k: calls.append(1) or real(*a, **k))
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        assert not calls  # transformers' own forward is untouched
        with rope_active():
            fused = loaded.model(input_ids=ids).logits
    assert len(calls) == len(_attention_names(loaded.model))  # once per layer, q and k together
    assert torch.equal(plain, before)
    assert torch.equal(fused, plain)  # the reference is transformers' op order


def test_unexpected_calls_run_the_original(family_model, monkeypatch):
    family, loaded = family_model
    py_module = _PY_MODULE[family]
    install_rope(loaded.model, impl="torch")
    import agentctx.kernels.rope as rope_mod

    monkeypatch.setattr(rope_mod, "apply_rope_reference", lambda *a, **k: pytest.fail("fused path taken"))
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 5, 4, 8, generator=g), torch.randn(1, 5, 2, 8, generator=g)  # (B, T, H, D)
    cos, sin = torch.randn(1, 5, 8, generator=g), torch.randn(1, 5, 8, generator=g)
    original = _ORIGINAL[py_module]
    fn = py_module.apply_rotary_pos_emb
    with rope_active():
        for got, want in zip(fn(q, k, cos, sin, unsqueeze_dim=2), original(q, k, cos, sin, unsqueeze_dim=2)):
            assert torch.equal(got, want)
        qh, kh = q.transpose(1, 2), k.transpose(1, 2)
        for got, want in zip(fn(qh, kh, cos, sin, 1), original(qh, kh, cos, sin, 1)):  # positional extra
            assert torch.equal(got, want)
        for got, want in zip(fn(qh, kh, cos.double(), sin.double()), original(qh, kh, cos.double(), sin.double())):
            assert got.dtype == torch.float64 and torch.equal(got, want)  # promotion: not the kernel's contract
        q_out, _ = fn(qh.clone().requires_grad_(), kh, cos, sin)  # the kernel has no backward
        assert q_out.grad_fn is not None


def test_runner_with_fused_rope_equals_unfused(family_model):
    _, loaded = family_model
    install_rope(loaded.model, impl="torch")
    runner = ModelRunner(loaded, page_size=16, prefill_chunk_tokens=64)
    assert runner.fused_rope is False and runner.rope is None  # auto: off on CPU
    ids = torch.randint(4, 259, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    doc = runner.prefill(ids[:140], progress=False)
    want = runner.extend(doc, runner.new_tail(doc), ids[140:], all_logits=True)
    runner.fused_rope = True  # what "on" sets on CUDA
    doc2 = runner.prefill(ids[:140], progress=False)
    got = runner.extend(doc2, runner.new_tail(doc2), ids[140:], all_logits=True)
    assert torch.equal(got, want)
    ref = runner.reference_logits(ids)  # transformers' own forward: the context variable is off there
    with rope_active(False):
        assert torch.equal(ref, runner.reference_logits(ids))


# --- attention modules that must keep their own code -------------------------------------


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Interleaved-pairs RoPE (GPT-J style): a module-level function of that name that is not
    transformers' rotate_half convention, so the probe must refuse it."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def rot(x):
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


class _Heads(nn.Module):
    def __init__(self, config=True):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.head_dim = 8
        if config:
            self.config = SimpleNamespace(num_attention_heads=2, num_key_value_heads=1)


class InterleavedAttention(_Heads):
    def forward(self, q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)


class NoRopeAttention(_Heads):
    def forward(self, x):
        return self.proj(x)


class HeadlessAttention(_Heads):
    def __init__(self):
        super().__init__(config=False)

    def forward(self, q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)


def test_unrecognised_attention_keeps_its_code(caplog):
    model = nn.ModuleDict({"interleaved": InterleavedAttention(), "norope": NoRopeAttention(),
                           "headless": HeadlessAttention(), "mha": nn.MultiheadAttention(8, 2)})
    with caplog.at_level(logging.WARNING):
        report = install_rope(model, impl="torch")
    assert not report.fused
    assert set(report.skipped) == {"interleaved", "norope", "headless", "mha"}
    assert "something other than transformers' RoPE" in report.skipped["interleaved"]
    assert "does not call the module-level apply_rotary_pos_emb" in report.skipped["norope"]
    assert "no head counts" in report.skipped["headless"]
    assert "defines no apply_rotary_pos_emb" in report.skipped["mha"]
    assert "keep transformers' RoPE" in caplog.text
    assert globals()["apply_rotary_pos_emb"] is apply_rotary_pos_emb  # not patched
    assert not hasattr(apply_rotary_pos_emb, "_agentctx_impl")


def test_bad_settings_are_refused(family_model):
    # Imported here: it needs pydantic, which the GPU image (running this file's GPU test) lacks.
    from agentctx.config import ModelConfig

    _, loaded = family_model
    with pytest.raises(ValueError, match="fused_rope must be one of"):
        ModelRunner(loaded, fused_rope="yes")
    with pytest.raises(ValueError, match="needs a CUDA model"):
        ModelRunner(loaded, fused_rope="on")
    with pytest.raises(ValueError, match="impl must be"):
        install_rope(loaded.model, impl="cuda")
    with pytest.raises(ValueError):
        ModelConfig(fused_rope="maybe")
    assert ModelConfig(fused_rope="off").fused_rope == "off"
    assert ModelRunner(loaded, fused_rope="off").rope is None


def test_engine_describes_fused_rope(family_model):
    _, loaded = family_model
    engine = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, fused_rope="off")
    assert engine.describe()["fused_rope"] == 0


# The Triton kernel inside real attention forwards (transposed projections, Gemma's q/k
# norms before RoPE), on CPU tensors under the interpreter.
_INTERPRETED_MODELS = """
import json, torch
import agentctx.kernels.triton_rope as kernel
from transformers import AutoModelForCausalLM
from agentctx.serving.fusions.rope import install_rope, rope_active
from tests.factories import TINY_FAMILIES, tiny_config
launches, real = [], kernel.triton_rope
kernel.triton_rope = lambda *a, **k: launches.append(1) or real(*a, **k)  # before the wrappers bind it
out = {}
for family in TINY_FAMILIES:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    report = install_rope(model, impl="triton")
    ids = torch.arange(4, 30).view(1, -1)
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        launches.clear()
        with rope_active():
            fused = model(input_ids=ids).logits
    out[family] = dict(fused=len(report.fused), skipped=report.skipped, launches=len(launches),
                       err=(fused - plain).abs().max().item(), scale=plain.abs().max().item())
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_kernel_in_tiny_models_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _INTERPRETED_MODELS], cwd=_REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == set(TINY_FAMILIES)
    for family, r in results.items():
        assert r["fused"] > 0 and not r["skipped"] and r["launches"] == r["fused"], (family, r)
        assert r["err"] <= 1e-5 * max(1.0, r["scale"]), (family, r)  # fp32: the same math, one rounding order


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_fused_rope_matches_unfused_on_cuda(family, dtype, tmp_path):
    """auto fuses every attention layer's RoPE on CUDA; graph-mode logits stay within rounding."""
    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint(family, tmp_path), dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64, query_mode="graph")
    fused, plain = ModelRunner(loaded, **kw), ModelRunner(loaded, fused_rope="off", **kw)
    assert fused.fused_rope and set(fused.rope.fused) == _attention_names(loaded.model) and not fused.rope.skipped
    assert not plain.fused_rope and plain.rope is None
    assert_runners_agree(fused, plain, dtype, argmax_fp32=False)
