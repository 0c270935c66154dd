"""serving.fusions.proj: merged q/k/v and gate/up products, only while active, no extra memory.

On CPU in fp32 a merged product may differ from the separate ones in the last bits (the
GEMM blocks a wider matrix differently), so logits are compared within 1e-5 relative; the
module weights are checked to be views of one stacked tensor (same storage).
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from agentctx.serving.fusions.proj import install_proj, proj_active
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint
from tests.serving.runner_compare import assert_runners_agree


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family_path(request, tmp_path_factory):
    return make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


def _close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-5) -> bool:
    return (a - b).abs().max().item() <= rel * max(1.0, b.abs().max().item())


def _groups(model):
    attn = {n for n, m in model.named_modules() if hasattr(m, "q_proj")}
    mlp = {n for n, m in model.named_modules() if hasattr(m, "gate_proj")}
    return attn, mlp


def test_every_attention_and_mlp_is_merged_into_shared_storage(family_path):
    loaded = load_model(family_path, dtype=torch.float32, device="cpu")
    model = loaded.model
    params_before = sum(p.numel() for p in model.parameters())
    report = install_proj(model)
    attn, mlp = _groups(model)
    assert attn and mlp and not report.skipped
    assert report.fused == {**{n: "qkv" for n in attn}, **{n: "gate_up" for n in mlp}}
    for name in attn:
        m = model.get_submodule(name)
        ptrs = {p.weight.untyped_storage().data_ptr() for p in (m.q_proj, m.k_proj, m.v_proj)}
        assert len(ptrs) == 1  # one stacked tensor, the modules hold row views of it
    for name in mlp:
        m = model.get_submodule(name)
        assert m.gate_proj.weight.untyped_storage().data_ptr() == m.up_proj.weight.untyped_storage().data_ptr()
    assert sum(p.numel() for p in model.parameters()) == params_before
    assert install_proj(model).fused == report.fused  # idempotent


def test_merged_products_run_only_while_active(family_path, monkeypatch):
    loaded = load_model(family_path, dtype=torch.float32, device="cpu")
    ids = torch.arange(4, 60).view(1, -1)
    with torch.no_grad():
        before = loaded.model(input_ids=ids).logits
    install_proj(loaded.model)
    calls = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda *a, **k: calls.append(a[1].shape[0]) or real_linear(*a, **k))
    with torch.no_grad():
        plain = loaded.model(input_ids=ids).logits
        n_plain = len(calls)
        calls.clear()
        with proj_active():
            merged = loaded.model(input_ids=ids).logits
    layers = loaded.model.config.num_hidden_layers
    assert torch.equal(plain, before)  # transformers' own forward: same numbers, views or not
    assert n_plain == len(calls) + 3 * layers  # 7 products per layer became 4
    assert _close(merged, plain)


def test_k_and_v_take_the_merged_result_only_for_q_projs_input(family_path):
    loaded = load_model(family_path, dtype=torch.float32, device="cpu")
    install_proj(loaded.model)
    attn = next(m for _, m in loaded.model.named_modules() if hasattr(m, "q_proj"))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, attn.q_proj.in_features, generator=g)
    y = torch.randn(3, attn.q_proj.in_features, generator=g)
    with torch.no_grad(), proj_active():
        attn.q_proj(x)
        k_other = attn.k_proj(y)  # not the tensor q_proj saw: the module's own product
        k_same, v_same = attn.k_proj(x), attn.v_proj(x)
        v_again = attn.v_proj(x)  # handed over once only; then its own product again
    assert torch.equal(k_other, nn.functional.linear(y, attn.k_proj.weight, attn.k_proj.bias))
    assert _close(k_same, nn.functional.linear(x, attn.k_proj.weight, attn.k_proj.bias))
    assert _close(v_same, nn.functional.linear(x, attn.v_proj.weight, attn.v_proj.bias))
    assert torch.equal(v_again, nn.functional.linear(x, attn.v_proj.weight, attn.v_proj.bias))


def test_runner_with_merged_projections_equals_unmerged_and_transformers(family_path):
    ids = torch.randint(4, 259, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    plain = ModelRunner(load_model(family_path, dtype=torch.float32, device="cpu"), page_size=16,
                        prefill_chunk_tokens=64)
    assert plain.proj is None and plain.fused_proj is False  # auto: off on CPU
    merged = ModelRunner(load_model(family_path, dtype=torch.float32, device="cpu"), page_size=16,
                         prefill_chunk_tokens=64, fused_proj="on")
    assert merged.fused_proj and merged.proj.fused
    out = []
    for runner in (plain, merged):
        doc = runner.prefill(ids[:140], progress=False)
        out.append(runner.extend(doc, runner.new_tail(doc), ids[140:], all_logits=True))
    assert _close(out[1], out[0])
    ref = merged.reference_logits(ids)[140:]  # transformers' forward on the merged runner's model
    assert _close(out[1], ref, rel=1e-4)


class _MixedBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(8, 8), nn.Linear(8, 4, bias=False), nn.Linear(8, 4)


class _NoDown(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(8, 16), nn.Linear(8, 16)


class _Sub(nn.Linear):
    pass


class _Subclassed(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = _Sub(8, 8), nn.Linear(8, 4), nn.Linear(8, 4)


def test_unmergeable_modules_keep_their_own_products(caplog):
    model = nn.ModuleDict({"mixed": _MixedBias(), "nodown": _NoDown(), "sub": _Subclassed()})
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    with caplog.at_level(logging.WARNING):
        report = install_proj(model)
    assert not report.fused and set(report.skipped) == {"mixed", "nodown", "sub"}
    assert "no down_proj" in report.skipped["nodown"]
    assert "keep their own products" in caplog.text
    for n, p in model.named_parameters():  # nothing rebound or changed
        assert torch.equal(p, weights[n])
    assert "forward" not in vars(model["mixed"].q_proj)


def test_runner_and_config_refuse_unknown_settings(family_path):
    from agentctx.config import ModelConfig

    with pytest.raises(ValueError, match="fused_proj must be one of"):
        ModelRunner(load_model(family_path, dtype=torch.float32, device="cpu"), page_size=16,
                    prefill_chunk_tokens=64, fused_proj="yes")
    with pytest.raises(ValueError):
        ModelConfig(fused_proj="yes")


def test_a_weight_replaced_after_install_is_never_read_stale(family_path):
    loaded = load_model(family_path, dtype=torch.float32, device="cpu")
    install_proj(loaded.model)
    ids = torch.arange(4, 40).view(1, -1)
    with torch.no_grad():
        for _, m in loaded.model.named_modules():
            if hasattr(m, "k_proj"):
                m.k_proj.weight.data = m.k_proj.weight.data * 2  # new storage, as .to() would make
            if hasattr(m, "up_proj"):
                m.up_proj.weight.data = m.up_proj.weight.data * 0.5
        plain = loaded.model(input_ids=ids).logits
        with proj_active():
            merged = loaded.model(input_ids=ids).logits
    assert torch.equal(merged, plain)  # the stacked copies are stale: the modules' own products ran


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merged_projections_on_cuda_graphs_match_unmerged(family, dtype, tmp_path):
    """auto merges on CUDA; graph-mode logits (with every other fusion on) stay within rounding
    of the unmerged ones; test_model_runner_gpu holds the merged default to transformers."""
    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint(family, tmp_path), dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64, query_mode="graph")
    merged, plain = ModelRunner(loaded, **kw), ModelRunner(loaded, fused_proj="off", **kw)
    attn, mlp = _groups(loaded.model)
    assert merged.fused_proj and set(merged.proj.fused) == attn | mlp and not plain.fused_proj
    # act(gate) * up as one kernel in every MLP (the tiny families: Gemma's tanh GELU, the others' SiLU).
    want_act = "gelu_tanh" if family.startswith("gemma") else "silu"
    assert merged.proj.act_mul == {n: want_act for n in mlp}
    assert_runners_agree(merged, plain, dtype)
