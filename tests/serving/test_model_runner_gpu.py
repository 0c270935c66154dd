"""Paged forward on CUDA vs transformers' own forward (tiny random models of the real families)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, greedy_tokens, make_tiny_checkpoint
from tests.serving.runner_compare import assert_runners_agree

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_matches_transformers_on_cuda(family, dtype, tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = False
    path = make_tiny_checkpoint(family, tmp_path)
    runner = ModelRunner(load_model(path, dtype=dtype, device="cuda"), page_size=16, prefill_chunk_tokens=64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 259, (300,), generator=g).tolist()
    doc_ids, q_ids = ids[:-12], ids[-12:]
    ref = runner.reference_logits(ids)
    doc = runner.prefill(doc_ids, progress=False)
    got = runner.extend(doc, runner.new_tail(doc), q_ids, all_logits=True)
    want = ref[len(doc_ids):]
    rel = ((got - want).norm() / want.norm()).item()
    # fp32: rounding only. bf16: our kernels accumulate in fp32, transformers' SDPA in bf16.
    assert rel < (1e-4 if dtype == torch.float32 else 3e-2), rel
    if dtype == torch.float32:
        assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_queries_match_eager(family, dtype, tmp_path):
    """Replayed CUDA graphs (serving.runner.static_query) give the eager path's tokens and logits,
    for several queries with different page sets sharing one set of graphs."""
    torch.backends.cuda.matmul.allow_tf32 = False
    path = make_tiny_checkpoint(family, tmp_path)
    loaded = load_model(path, dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64)
    eager = ModelRunner(loaded, query_mode="eager", **kw)
    graph = ModelRunner(loaded, query_mode="graph", **kw)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 259, (400,), generator=g).tolist()
    doc = eager.prefill(ids[:380], progress=False)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for pages in ([0, 3, 7, 23], [1, 2, 3, 23], None, [0, 5, 9, 23]):
        q = ids[380:380 + 11]
        te, tg = eager.new_tail(doc), graph.new_tail(doc)
        le, lg = eager.extend(doc, te, q, pages), graph.extend(doc, tg, q, pages)
        toks_e, toks_g = [], []
        for _ in range(10):
            rel = ((lg - le).norm() / le.norm()).item()
            assert rel < tol, (pages, rel)
            ne, ng = int(le.argmax()), int(lg.argmax())
            toks_e.append(ne)
            toks_g.append(ng)
            le, lg = eager.extend(doc, te, [ne], pages), graph.extend(doc, tg, [ne], pages)
        if dtype == torch.float32:
            assert toks_g == toks_e, pages
    slots = list(doc.query_slots.values())
    assert slots and not any(s.failed for s in slots)
    assert all({1, 16} <= set(s.graphs) for s in slots), [sorted(s.graphs) for s in slots]


def test_engine_on_cuda_graphs_matches_eager_engine(tmp_path):
    """LocalEngine's generate / stream / score (forked tails) with CUDA-graph queries (the
    default on CUDA) against the same engine run eagerly."""
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.types import GenerateRequest, ScoreRequest

    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint("gemma3_text", tmp_path), dtype=torch.float32, device="cuda")
    graph = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32)
    eager = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, query_mode="eager")
    assert graph.describe()["query_mode"] == "graph"
    doc = graph.tokenize_document("The supplier shall deliver 40 crates of apples every Monday. " * 4)
    for e in (graph, eager):
        e.prefill("c", doc, progress=False)
    for pages in (None, (0, 3, 5), (1, 3, 5)):
        req = GenerateRequest("c", "Question: what?", pages=pages, max_new_tokens=12)
        want, got = eager.generate(req), graph.generate(req)
        assert got.token_ids == want.token_ids, pages
        assert "".join(graph.stream(req)) == want.text
    sreq = ScoreRequest("c", " Risk:", (" low", " high", " medium risk"))
    for a, b in zip(eager.score(sreq), graph.score(sreq)):
        assert abs(a - b) < 1e-3
    slots = graph.kv.get("c").query_slots
    assert slots and all(s.graphs and not s.failed for s in slots.values())
    kernels = graph.describe()["slot_kernels"]
    assert any(k.startswith("window float32") for k in kernels) and set(kernels.values()) == {"triton"}, kernels


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_norms_match_unfused_on_cuda(family, dtype, tmp_path):
    """auto fuses every RMSNorm on CUDA; graph-mode logits stay within rounding of the unfused ones."""
    torch.backends.cuda.matmul.allow_tf32 = False
    path = make_tiny_checkpoint(family, tmp_path)
    loaded = load_model(path, dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64, query_mode="graph")
    fused, plain = ModelRunner(loaded, **kw), ModelRunner(loaded, fused_norms="off", **kw)
    norms = {n for n, m in loaded.model.named_modules() if type(m).__name__.endswith("RMSNorm")}
    assert fused.fused_norms and set(fused.norms.fused) == norms and not fused.norms.skipped
    assert not plain.fused_norms
    # Gemma's sandwich-norm layers run their residual steps as one kernel each (serving/fusions/sandwich.py).
    n_layers = loaded.model.config.num_hidden_layers
    assert len(fused.sandwich.fused) == (n_layers if family.startswith("gemma") else 0), fused.sandwich
    assert_runners_agree(fused, plain, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slot_kernels_pass_their_first_call_check_on_cuda(dtype, tmp_path):
    """Graph queries of a Gemma 3 model use the Triton tail and window kernels, not the
    torch fallback that a failed first-call check would switch to (kernels/tail_merge.py)."""
    from agentctx.kernels import tail_merge

    path = make_tiny_checkpoint("gemma3_text", tmp_path)
    runner = ModelRunner(load_model(path, dtype=dtype, device="cuda"), page_size=16, prefill_chunk_tokens=64,
                         query_mode="graph")
    ids = torch.randint(4, 259, (300,), generator=torch.Generator().manual_seed(5)).tolist()
    doc = runner.prefill(ids[:280], progress=False)
    greedy_tokens(runner, doc, ids[280:], pages=[0, 3, 9, 17], max_new_tokens=4)
    seen = {sig: ok for sig, ok in tail_merge._checked.items() if sig[1].startswith("cuda") and sig[2] == dtype}
    assert {sig[0] for sig in seen} == {"tail_merged", "window"} and all(seen.values()), seen
