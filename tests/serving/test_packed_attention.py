"""One-token rows of a packed step attended together per document (serving/runner/packed_attention.py)
against the row-by-row path, on tiny models of each family (Gemma 3: sliding window 16)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.runner import packed_attention
from agentctx.serving.runner.batch_forward import Row, run_rows
from agentctx.serving.runner.packed_attention import ExtendStep, decode_groups
from tests.factories import TINY_FAMILIES, tiny_runner, token_ids

FP32_ATOL = 1e-5


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def runner(request, tmp_path_factory):
    return tiny_runner(request.param, tmp_path_factory.mktemp(request.param))


def _decode(runner, docs, plans, prompts, steps, grouped):
    """Prompts row by row, then ``steps`` packed decode steps; the logits of every step."""
    runner.group_decode_rows = grouped
    tails = [runner.new_tail(docs[d]) for d, _ in plans]
    first = run_rows(runner, [Row(docs[d], t, p, pages) for (d, pages), t, p in zip(plans, tails, prompts)])
    nxt = [int(x.argmax()) for x in first]
    out = []
    for _ in range(steps):
        logits = run_rows(runner, [Row(docs[d], t, [n], pages) for (d, pages), t, n in zip(plans, tails, nxt)])
        out.append(torch.stack(logits))
        nxt = [int(x.argmax()) for x in logits]
    runner.group_decode_rows = True
    return torch.stack(out), tails


# Two documents; on each, rows over their own pages, every page, and one page; prompts from one
# token (a row whose tail starts empty) to 27 (longer than the sliding window of 16).
PLANS = [(0, (0, 3, 7)), (0, None), (0, (5,)), (1, (1, 2)), (1, None), (0, (2, 8, 9, 4))]
PROMPT_LENS = [5, 27, 1, 9, 20, 3]


def test_grouped_decode_rows_equal_row_by_row(runner):
    docs = [runner.prefill(token_ids(150, 1), progress=False), runner.prefill(token_ids(70, 2), progress=False)]
    prompts = [token_ids(n, 10 + i) for i, n in enumerate(PROMPT_LENS)]
    got, tails = _decode(runner, docs, PLANS, prompts, 6, grouped=True)
    want, ref_tails = _decode(runner, docs, PLANS, prompts, 6, grouped=False)
    torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    for t, r in zip(tails, ref_tails):  # the tails' stored KV too, layer by layer
        assert t.length == r.length and t.k.keys() == r.k.keys()
        for l in t.k:
            torch.testing.assert_close(t.k[l], r.k[l], atol=FP32_ATOL, rtol=0)
            torch.testing.assert_close(t.v[l], r.v[l], atol=FP32_ATOL, rtol=0)


def test_groups_split_within_the_gather_budget(runner, monkeypatch):
    """A small budget splits a document's rows into several groups and leaves a row that alone
    exceeds it to the row-by-row path; the results do not change."""
    docs = [runner.prefill(token_ids(150, 3), progress=False), runner.prefill(token_ids(70, 4), progress=False)]
    prompts = [token_ids(n, 20 + i) for i, n in enumerate(PROMPT_LENS)]
    want, _ = _decode(runner, docs, PLANS, prompts, 3, grouped=False)
    doc = docs[0]
    lay = doc.layout
    page_bytes = 2 * doc.page_size * lay.num_kv_heads * lay.head_dim * 4
    monkeypatch.setattr(packed_attention, "GATHER_BYTES", 4 * page_bytes)
    got, _ = _decode(runner, docs, PLANS, prompts, 3, grouped=True)
    torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)
    # The groups of one decode step under that budget, exactly.
    tails = [runner.new_tail(docs[d]) for d, _ in PLANS]
    steps = []
    for (d, pages), t in zip(PLANS, tails):
        table, count = runner.block_table(docs[d], pages)
        steps.append(ExtendStep(docs[d], t, torch.tensor([docs[d].num_tokens]), table, count,
                                docs[d].slot_lens(), "torch"))
    spans = [(i, i + 1) for i in range(len(steps))]
    groups = decode_groups(steps, spans, runner.config.num_attention_heads)
    # Rows 0 (3 pages) and 2 (1 page) fit 4 pages together, row 5 (4 pages) goes alone; the
    # dense rows (1: 10 pages of doc 0, 4: 5 pages of doc 1) read in place, within the budget
    # only if their scores fit (doc 1's 70 tokens do, doc 0's 150 do not).
    heads = runner.config.num_attention_heads
    fits = [2 * heads * docs[d].num_tokens * 4 <= 4 * page_bytes for d in (0, 1)]
    expect = [[0, 2], [5], [3]] + ([[1]] if fits[0] else []) + ([[4]] if fits[1] else [])
    assert sorted(g.rows for g in groups) == sorted(expect)
    assert all(g.table is None for g in groups if g.rows in ([1], [4]))


def test_prompt_rows_are_not_grouped(runner):
    doc = runner.prefill(token_ids(40, 5), progress=False)
    tails = [runner.new_tail(doc) for _ in range(3)]
    steps = []
    for t, n in zip(tails, (1, 4, 1)):
        table, count = runner.block_table(doc, None)
        steps.append(ExtendStep(doc, t, torch.arange(40, 40 + n), table, count, doc.slot_lens(), "torch"))
    groups = decode_groups(steps, [(0, 1), (1, 5), (5, 6)], runner.config.num_attention_heads)
    assert [g.rows for g in groups] == [[0, 2]] and groups[0].tokens.tolist() == [0, 5]
