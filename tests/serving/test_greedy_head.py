"""The int8 greedy head (serving/runner/greedy_head.py) against the full float32 product: same argmax,
exact values wherever it gives one, on random heads with outlier dimensions and near-ties, and
through the engine on a tiny model."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.engine import LocalEngine
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.batch_forward import Row, run_rows
from agentctx.serving.runner.greedy_head import BACKENDS, GreedyHead, fbgemm_available
from agentctx.serving.runner.model_runner import ModelRunner
from agentctx.serving.types import GenerateRequest, SamplingParams
from tests.factories import make_tiny_checkpoint

# Every backend that runs on this machine (fbgemm needs torch's x86 quantized engine).
HERE = [b for b in BACKENDS if b != "fbgemm" or fbgemm_available()]


def _head(v=6000, k=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(v, k, generator=g) * 0.05
    w[:, 7] *= 8  # a column of large weights
    return w


def _hidden(b, k, seed, outlier=60.0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(b, k, generator=g) * 2
    h[:, 3] = outlier  # decode hidden states carry a few large dimensions (Gemma: ~56)
    h[1:, 11] = -outlier / 2
    return h


def _full(w, h, bias=None, cap=None):
    x = h @ w.t()
    if bias is not None:
        x = x + bias
    return cap * torch.tanh(x / cap) if cap else x


@pytest.mark.parametrize("backend", HERE)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("cap", [None, 30.0])
def test_same_argmax_and_exact_values_where_given(bias, cap, backend):
    w = _head()
    b = torch.randn(w.shape[0]) * 0.5 if bias else None
    head = GreedyHead(w, b, softcap=cap, backend=backend)
    for seed in range(20):
        h = _hidden(8, w.shape[1], seed)
        got, want = head.logits(h), _full(w, h, b, cap)
        assert torch.equal(got.argmax(1), want.argmax(1))
        given = torch.isfinite(got)
        assert bool(given.any(1).all()) and int(given.sum(1).max()) < w.shape[0] // 10  # a few, not all
        torch.testing.assert_close(got[given], want[given], atol=1e-4, rtol=1e-6)
        assert bool(torch.isneginf(got[~given]).all())


@pytest.mark.parametrize("backend", HERE)
def test_near_ties_keep_the_float32_argmax(backend):
    """Rows that differ by a hair: every contender is a candidate, and the float32 values decide."""
    w = _head(v=3000)
    h = _hidden(4, w.shape[1], 5)
    top = int(_full(w, h)[0].argmax())
    for j, eps in enumerate((1e-6, -1e-6, 3e-7, 0.0)):
        w[100 + j] = w[top] + eps  # a near copy (the last an exact copy: the lower index wins)
    head = GreedyHead(w, backend=backend)
    got, want = head.logits(h), _full(w, h)
    assert torch.equal(got.argmax(1), want.argmax(1))
    assert bool(torch.isfinite(got[0, [top, 100, 101, 102, 103]]).all())


@pytest.mark.parametrize("backend", HERE)
def test_the_bound_holds_for_a_hostile_hidden_row(backend):
    w = _head()
    head = GreedyHead(w, backend=backend)
    h = torch.zeros(3, w.shape[1])
    h[0, 0] = 1e4  # one huge dimension
    h[1] = torch.linspace(-50, 50, w.shape[1])
    h[2, ::2] = 1e-3  # tiny values: quantised to a few levels
    cand = head.candidates(h)
    assert bool(cand[torch.arange(3), _full(w, h).argmax(1)].all())
    assert torch.equal(head.logits(h).argmax(1), _full(w, h).argmax(1))


def test_too_many_candidates_falls_back_to_the_full_product():
    w = _head(v=500)
    head = GreedyHead(w, max_candidates=1)
    h = _hidden(3, w.shape[1], 7)
    torch.testing.assert_close(head.logits(h), _full(w, h), atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", HERE)
def test_integer_products_are_exact(backend):
    """Each backend's product of integer levels is the exact integer product times the row
    scales: for fbgemm this checks that the guard row pins the op's own input scale at 1."""
    w = _head(v=700)
    head = GreedyHead(w, backend=backend)
    g = torch.Generator().manual_seed(3)
    lv = head.level
    levels = torch.randint(-lv, lv + 1, (9, w.shape[1]), generator=g).float()
    levels[0] = lv  # the extremes, where a 7- or 8-bit quantiser would clip or saturate
    levels[1, ::2] = -lv
    q = torch.round(w / head.scale[:, None]).clamp(-127, 127).double()
    exact = (levels.double() @ q.t()) * head.scale.double()
    got = head._scaled_products(levels).double()
    torch.testing.assert_close(got, exact, rtol=2e-7, atol=0)


def test_refuses_what_it_cannot_bound():
    with pytest.raises(ValueError, match="float32 CPU"):
        GreedyHead(torch.randn(10, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="float32 CPU"):
        GreedyHead(torch.randn(10))
    with pytest.raises(ValueError, match="backend"):
        GreedyHead(torch.randn(10, 4), backend="cuda")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("gemma3_text"))


def test_greedy_rows_pick_what_full_rows_pick(tiny_path):
    runner = ModelRunner(load_model(tiny_path, device="cpu"), page_size=16, prefill_chunk_tokens=32)
    runner.cpu_greedy_head = True  # always, whatever this CPU's int8 speed ("auto" times it)
    doc = runner.prefill(list(range(5, 90)), progress=False)
    tails = {kind: [runner.new_tail(doc) for _ in range(3)] for kind in ("last", "greedy")}
    nxt = {kind: [7, 8, 9] for kind in tails}
    for _ in range(5):
        for kind, ts in tails.items():
            out = run_rows(runner, [Row(doc, t, [n], (0, 2) if i else None, kind) for i, (t, n) in
                                    enumerate(zip(ts, nxt[kind]))])
            nxt[kind] = [int(x.argmax()) for x in out]
        assert nxt["greedy"] == nxt["last"]
    assert runner._greedy_heads


def test_engine_uses_it_only_for_plain_greedy_requests(tiny_path):
    engine = LocalEngine(load_model(tiny_path, device="cpu"), page_size=16, prefill_chunk_tokens=32)
    engine.runner.cpu_greedy_head = True
    engine.prefill("doc", engine.tokenize_document("a b c d e f g h " * 20), progress=False)
    engine.generate(GenerateRequest("doc", "question", max_new_tokens=4, temperature=0.7, seed=1))
    engine.generate(GenerateRequest("doc", "question", max_new_tokens=4,
                                    sampling=SamplingParams(frequency_penalty=0.5)))
    assert not engine.runner._greedy_heads  # sampling and penalties read the full logits
    plain = engine.generate(GenerateRequest("doc", "question", max_new_tokens=6))
    assert engine.runner._greedy_heads
    engine.runner.cpu_greedy_head = False
    assert engine.generate(GenerateRequest("doc", "question", max_new_tokens=6)).token_ids == plain.token_ids


def test_auto_keeps_the_int8_head_only_where_it_is_faster(tiny_path):
    """"auto" times the float32 head and each int8 backend once on the first greedy rows and keeps
    the fastest; either way the token is the full head's argmax."""
    runner = ModelRunner(load_model(tiny_path, device="cpu"), page_size=16, prefill_chunk_tokens=32)
    assert runner.cpu_greedy_head == "auto"
    hidden = torch.randn(3, runner.model.lm_head.weight.shape[1], generator=torch.Generator().manual_seed(5))
    got = runner.greedy_from_hidden(hidden)
    assert runner.cpu_greedy_head == "auto"
    choice = runner._greedy_by_rows[4]  # 3 rows: the bucket of up to 4
    assert choice in ("float32", *HERE)
    assert set(runner._greedy_heads) == ({choice} - {"float32"})  # only the chosen head is kept
    assert torch.equal(got.argmax(-1), runner.logits_from_hidden(hidden).argmax(-1))


def test_vnni_is_read_from_cpuinfo(tmp_path):
    from agentctx.serving.runner.greedy_head import cpu_has_vnni

    avx2 = tmp_path / "avx2"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    vnni = tmp_path / "vnni"
    vnni.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not cpu_has_vnni.__wrapped__(str(avx2))
    assert cpu_has_vnni.__wrapped__(str(vnni))
    assert not cpu_has_vnni.__wrapped__(str(tmp_path / "missing"))
