"""Batched decode rows as replayed CUDA graphs (serving/runner/batch_slots.py) against the eager packed
forward, and the engine loop in graph mode against one request at a time (tiny random models of
the real families)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.engine.loop import EngineLoop
from agentctx.serving.engine.request import Request
from agentctx.serving.engine.scheduler import Scheduler
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.batch_forward import Row, release, run_greedy_steps, run_step
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint
from tests.serving.runner_compare import assert_rows_agree

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_rows_match_eager_rows(family, dtype, tmp_path):
    """Five queries over two documents, different plans; one sits out three steps (its row runs
    as a dummy inside the replayed graph). fp32: < 1e-4 and identical greedy tokens; bf16: the
    project's 3e-2 relative rule."""
    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint(family, tmp_path), dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64)
    eager, graph = ModelRunner(loaded, query_mode="eager", **kw), ModelRunner(loaded, query_mode="graph", **kw)
    graph.batch_rows = 8
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(4, 259, (700,), generator=g).tolist()
    docs = [eager.prefill(ids[:380], progress=False), eager.prefill(ids[380:680], progress=False)]
    plans = [(0, None), (0, (0, 3, 7, 23)), (1, (1, 2, 18)), (1, None), (0, (5, 9, 23))]
    toks = [ids[680 + i : 683 + i + i] for i in range(len(plans))]
    tails = {r: [r.new_tail(docs[d]) for d, _ in plans] for r in (eager, graph)}
    schedule = [[0, 1, 2, 3, 4]] * 2 + [[0, 2, 3, 4]] * 3 + [[0, 1, 2, 3, 4]] * 4
    assert_rows_agree(eager, graph, lambda r, i: Row(docs[plans[i][0]], tails[r][i], toks[i], plans[i][1]),
                      schedule, toks, dtype)
    assert all(t.batch is not None for t in tails[graph])
    slots = [bs for d in docs for bs in d.batch_slots.values()]
    assert slots and all(bs.graphs and not bs.failed for bs in slots)  # replays, not the eager fallback
    for t in tails[graph]:
        release(t)
    assert not any(any(bs.live) for bs in slots)


@pytest.mark.parametrize("window", [1, 4])
def test_graph_engine_loop_matches_one_at_a_time(tmp_path, window):
    """Eight requests through one engine loop in graph mode: each one's greedy tokens equal the
    same request run alone through the eager path (fp32), with one host sync per step; with greedy
    decode windows of 4, one sync per window."""
    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint("gemma3_text", tmp_path), dtype=torch.float32, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64)
    eager, graph = ModelRunner(loaded, query_mode="eager", **kw), ModelRunner(loaded, query_mode="graph", **kw)
    graph.batch_rows = 8
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 259, (900,), generator=g).tolist()
    doc = eager.prefill(ids[:600], progress=False)
    agents = [(ids[600 + 20 * i : 610 + 20 * i + i], None if i % 3 == 0 else tuple(range(i, 38, 3)))
              for i in range(8)]

    def alone(prompt, pages):
        tail = eager.new_tail(doc)
        out = [int(eager.extend(doc, tail, prompt, pages).argmax())]
        for _ in range(15):
            out.append(int(eager.extend(doc, tail, [out[-1]], pages).argmax()))
        return out

    want = [alone(*a) for a in agents]
    loop = EngineLoop(lambda rows: run_step(graph, rows), Scheduler(max_rows=8), device="cuda",
                      run_greedy=lambda rows, k: run_greedy_steps(graph, rows, k), decode_steps=window)
    reqs = [loop.submit(Request(doc, graph.new_tail(doc), list(p), pages, max_new_tokens=16)) for p, pages in agents]
    for r in reqs:
        list(r.stream)
    loop.shutdown()
    assert [r.output_ids for r in reqs] == want
    assert loop.scheduler.stats.max_rows_seen >= 4
    if window == 1:
        assert loop.stats.host_syncs == loop.stats.steps
    else:
        assert loop.stats.windows > 0 and loop.stats.host_syncs < loop.stats.steps
