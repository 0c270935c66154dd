"""serving.fusions.sandwich: Gemma's residual steps as one kernel each, only while the norms' switch
is on, checked on a probe before use, and nothing installed for other layer shapes.

On CPU the fused layers run kernels.add_norm's torch reference, transformers' own op order, so
fp32 logits are identical to transformers' forward; the Triton kernel is checked in tests/kernels
(interpreter and GPU), and on a GPU test_model_runner_gpu runs the fused layers in graph mode.
"""

from __future__ import annotations

import pytest
import torch

import agentctx.kernels.add_norm as add_norm_mod
import agentctx.kernels.rmsnorm as rmsnorm_mod
from agentctx.serving.fusions import sandwich as sandwich_mod
from agentctx.serving.fusions.norms import install_norms, norms_active
from agentctx.serving.fusions.sandwich import install_sandwich
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import make_tiny_checkpoint
from tests.serving.runner_compare import assert_runners_agree


def _loaded(family, tmp_path):
    return load_model(make_tiny_checkpoint(family, tmp_path), dtype=torch.float32, device="cpu")


def _fused(family, tmp_path):
    loaded = _loaded(family, tmp_path)
    install_norms(loaded.model, impl="torch")
    return loaded, install_sandwich(loaded.model, impl="torch")


def test_gemma_layers_fuse_and_equal_transformers(tmp_path, monkeypatch):
    loaded, report = _fused("gemma3_text", tmp_path)
    n_layers = loaded.model.config.num_hidden_layers
    assert report.fused == [f"layer {i}" for i in range(n_layers)] and not report.skipped
    assert install_sandwich(loaded.model, impl="torch") is report  # idempotent
    adds, norms = [], []
    real_add, real_norm = add_norm_mod.add_norm2_reference, rmsnorm_mod.rms_norm_reference
    monkeypatch.setattr(add_norm_mod, "add_norm2_reference", lambda *a, **k: adds.append(1) or real_add(*a, **k))
    monkeypatch.setattr(rmsnorm_mod, "rms_norm_reference", lambda *a, **k: norms.append(1) or real_norm(*a, **k))
    ids = torch.arange(4, 40).view(1, -1)
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        assert not adds
        norms.clear()
        with norms_active():
            fused = loaded.model(input_ids=ids).logits
    assert torch.equal(plain, fused)
    assert len(adds) == 2 * n_layers
    # Norm modules that computed their own: layer 0's input norm and each layer's q and k norms;
    # every later input norm and the final norm took what the layer before handed over.
    assert len(norms) == 1 + 2 * n_layers


def test_runner_static_rows_with_fused_layers_equal_plain(tmp_path):
    """The batched static decode rows and prompt forwards of a runner with the fused layers switched
    on (CPU: the torch references) against a runner without any fusion: the same logits."""
    loaded, report = _fused("gemma3_text", tmp_path)
    assert report.fused
    kw = dict(page_size=16, prefill_chunk_tokens=64, query_mode="static")
    fused, plain = ModelRunner(loaded, **kw), ModelRunner(loaded, **kw)
    fused.fused_norms = True  # the switch our forwards set (auto only installs on CUDA)
    assert_runners_agree(fused, plain, torch.float32)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_pre_norm_layers_are_left_alone(family, tmp_path):
    loaded, report = _fused(family, tmp_path)
    assert not report.fused and "layer 0" in report.skipped
    ids = torch.arange(4, 30).view(1, -1)
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        with norms_active():
            fused = loaded.model(input_ids=ids).logits
    assert torch.equal(plain, fused)


def test_a_probe_mismatch_installs_nothing(tmp_path, monkeypatch, caplog):
    real = sandwich_mod.add_norm2

    def off_by_one(x, h, *a, **k):
        r, y = real(x, h, *a, **k)
        return r + 1.0, y

    monkeypatch.setattr(sandwich_mod, "add_norm2", off_by_one)
    loaded, report = _fused("gemma3_text", tmp_path)
    assert not report.fused and "differ" in report.skipped["model"]
    assert "keep transformers' forward" in caplog.text
    ids = torch.arange(4, 30).view(1, -1)
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        with norms_active():
            fused = loaded.model(input_ids=ids).logits
    assert torch.equal(plain, fused)  # the layers run transformers' code again
