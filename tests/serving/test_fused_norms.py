"""serving.fusions.norms: which modules get fused, with which convention, and only while active.

On CPU the fused forward runs the torch reference (impl="torch"), which equals
transformers' modules bit for bit, so runner logits must be identical; the Triton
kernel itself is checked in tests/kernels (interpreter and GPU).
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from agentctx.config import ModelConfig
from agentctx.serving.fusions.norms import install_norms, norms_active
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint

_STYLE = {"llama": "scale", "qwen3": "scale", "gemma3_text": "offset"}


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family_model(request, tmp_path_factory):
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, load_model(path, dtype=torch.float32, device="cpu")


def _norm_names(model):
    return {n for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")}


def test_every_norm_is_fused_with_its_family_convention(family_model):
    family, loaded = family_model
    report = install_norms(loaded.model, impl="torch")
    assert set(report.fused) == _norm_names(loaded.model) and report.fused
    assert set(report.fused.values()) == {_STYLE[family]}
    assert not report.skipped
    again = install_norms(loaded.model, impl="torch")  # idempotent: no second wrapper
    assert again.fused == report.fused


def test_fused_forward_runs_only_while_active(family_model, monkeypatch):
    _, loaded = family_model
    install_norms(loaded.model, impl="torch")
    calls = []
    import agentctx.kernels.rmsnorm as rmsnorm_mod

    real = rmsnorm_mod.rms_norm_reference
    monkeypatch.setattr(rmsnorm_mod, "rms_norm_reference", lambda *a, **k: calls.append(1) or real(*a, **k))
    ids = torch.arange(4, 40).view(1, -1)
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        assert not calls  # transformers' own forward is untouched
        with norms_active():
            fused = loaded.model(input_ids=ids).logits
    assert len(calls) == len(_norm_names(loaded.model))  # each norm module runs once per forward
    assert torch.equal(plain, fused)  # the reference is transformers' op order


def test_runner_with_fused_norms_equals_unfused(family_model):
    _, loaded = family_model
    install_norms(loaded.model, impl="torch")
    runner = ModelRunner(loaded, page_size=16, prefill_chunk_tokens=64)
    assert runner.fused_norms is False  # auto: off on CPU
    ids = torch.randint(4, 259, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    doc = runner.prefill(ids[:140], progress=False)
    want = runner.extend(doc, runner.new_tail(doc), ids[140:], all_logits=True)
    runner.fused_norms = True  # what "on" sets on CUDA
    doc2 = runner.prefill(ids[:140], progress=False)
    got = runner.extend(doc2, runner.new_tail(doc2), ids[140:], all_logits=True)
    assert torch.equal(got, want)


class WeirdRMSNorm(nn.Module):
    """Named like a norm, computes something else: must keep its own forward."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = 1e-6

    def forward(self, x):
        return x * self.weight - x.mean(-1, keepdim=True)


class NoWeightRMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6

    def forward(self, x):
        return x


def test_unrecognised_norms_keep_their_forward(caplog):
    model = nn.ModuleDict({"a": WeirdRMSNorm(8), "b": NoWeightRMSNorm()})
    with caplog.at_level(logging.WARNING):
        report = install_norms(model, impl="torch")
    assert not report.fused
    assert "neither" in report.skipped["a"] and "weight" in report.skipped["b"]
    assert "keep transformers' forward" in caplog.text
    x = torch.randn(2, 8)
    with norms_active():
        assert torch.equal(model["a"](x), x - x.mean(-1, keepdim=True))


def test_bad_settings_are_refused(family_model):
    _, loaded = family_model
    with pytest.raises(ValueError, match="fused_norms must be one of"):
        ModelRunner(loaded, fused_norms="yes")
    with pytest.raises(ValueError, match="needs a CUDA model"):
        ModelRunner(loaded, fused_norms="on")
    with pytest.raises(ValueError):
        ModelConfig(fused_norms="maybe")
    assert ModelConfig(fused_norms="off").fused_norms == "off"
