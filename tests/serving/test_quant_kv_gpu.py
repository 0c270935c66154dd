"""Quantised device pages on CUDA: the graph path (batched union rows through the union kernel, prompt
chunks through the query slots' page kernel, both reading fp8/int8 pages in registers) against the
eager path over the same pages dequantised (tiny random models of the real families)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.batch_forward import Row, release
from agentctx.serving.runner.model_runner import ModelRunner
from tests.factories import dequantized_copy, make_tiny_checkpoint
from tests.serving.runner_compare import assert_rows_agree

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family,dtype", [("llama", torch.float32), ("gemma3_text", torch.float32),
                                          ("llama", torch.bfloat16), ("gemma3_text", torch.bfloat16)])
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_graph_rows_over_quantised_pages_match_eager_rows_over_their_values(family, dtype, kv_dtype, tmp_path):
    """Five queries, different plans, one sitting out steps; fp32: < 1e-4 and the same greedy
    tokens; bf16: the project's 3e-2 relative rule."""
    torch.backends.cuda.matmul.allow_tf32 = False
    loaded = load_model(make_tiny_checkpoint(family, tmp_path), dtype=dtype, device="cuda")
    kw = dict(page_size=16, prefill_chunk_tokens=64)
    graph = ModelRunner(loaded, query_mode="graph", kv_dtype=kv_dtype, **kw)
    eager = ModelRunner(loaded, query_mode="eager", **kw)
    graph.batch_rows = 8
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 259, (420,), generator=g).tolist()
    doc = graph.prefill(ids[:380], progress=False)
    assert doc.quantized and doc.kv_dtype != dtype
    docs = {graph: doc, eager: dequantized_copy(doc)}
    plans = [None, (0, 3, 7, 23), (1, 2, 18), None, (5, 9, 23)]
    toks = [ids[380 + i : 383 + 2 * i] for i in range(len(plans))]
    tails = {r: [r.new_tail(docs[r]) for _ in plans] for r in docs}
    assert_rows_agree(eager, graph, lambda r, i: Row(docs[r], tails[r][i], toks[i], plans[i]),
                      [[0, 1, 2, 3, 4]] * 2 + [[0, 2, 3, 4]] * 3 + [[0, 1, 2, 3, 4]] * 3, toks, dtype)
    slots = list(doc.batch_slots.values())
    assert slots and all(bs.graphs and not bs.failed for bs in slots)  # replays, not the eager fallback
    for t in tails[graph]:
        release(t)
