"""One packed forward over many queries' rows (serving/runner/batch_forward.py): decode tokens and prompt
chunks over different documents and page sets, held to one query at a time and to transformers."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.runner.batch_forward import Row, run_rows
from tests.factories import TINY_FAMILIES, tiny_runner, token_ids

# fp32 on CPU: a packed matmul and a one-query matmul differ only by rounding.
FP32_ATOL = 1e-4


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def runner(request, tmp_path_factory):
    return tiny_runner(request.param, tmp_path_factory.mktemp(request.param))


def _greedy(logits, logit_ids):
    pick = int(logits.argmax())
    return logit_ids[pick] if logit_ids else pick


def test_mixed_rows_equal_one_query_at_a_time(runner):
    """Each step packs decode rows of running queries with the next chunk of a long prompt and a
    whole short prompt, over two documents and four plans; every row's logits equal the same
    query run alone, and greedy tokens are identical."""
    doc_a, doc_b = runner.prefill(token_ids(150, 1), progress=False), runner.prefill(token_ids(70, 2), progress=False)
    plans = [(doc_a, None, None), (doc_a, (0, 3, 7, 9), [5, 17, 40]), (doc_b, (1, 2), None), (doc_b, None, None)]
    # The last prompt is cut into 16-token chunks.
    prompts = [token_ids(5, 3), token_ids(9, 4), token_ids(3, 5), token_ids(40, 6)]
    alone = [runner.new_tail(d) for d, *_ in plans]
    want = []
    for (d, pages, ids), t, p in zip(plans, alone, prompts):
        want.append([runner.extend(d, t, p, pages, logit_ids=ids)])
    packed = [runner.new_tail(d) for d, *_ in plans]
    got: list[list[torch.Tensor]] = [[] for _ in plans]
    nxt: list[int | None] = [None] * len(plans)
    done = [0] * len(plans)
    # Step 1: the first three prompts whole, the long one's first chunk; then decode rows + chunks.
    for _ in range(6):
        rows, who = [], []
        for i, ((d, pages, ids), t) in enumerate(zip(plans, packed)):
            if done[i] < len(prompts[i]):
                chunk = prompts[i][done[i]: done[i] + 16]
                last = done[i] + len(chunk) == len(prompts[i])
                rows.append(Row(d, t, chunk, pages, "last" if last else "none", ids if last else None))
                done[i] += len(chunk)
            else:
                rows.append(Row(d, t, [nxt[i]], pages, logit_ids=ids))
            who.append(i)
        for i, res in zip(who, run_rows(runner, rows)):
            if res is not None:
                got[i].append(res)
                nxt[i] = _greedy(res, plans[i][2])
    for i, ((d, pages, ids), t) in enumerate(zip(plans, alone)):
        for _ in range(len(got[i]) - 1):
            want[i].append(runner.extend(d, t, [_greedy(want[i][-1], ids)], pages, logit_ids=ids))
    assert [len(g) for g in got] == [6, 6, 6, 4]
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            torch.testing.assert_close(a, b, atol=FP32_ATOL, rtol=0)
        assert [int(x.argmax()) for x in g] == [int(x.argmax()) for x in w]
    assert [t.length for t in packed] == [t.length for t in alone]


def test_packed_rows_with_all_pages_match_transformers(runner):
    doc_ids = [token_ids(100, 6), token_ids(45, 7)]
    docs = [runner.prefill(ids, progress=False) for ids in doc_ids]
    prompts = [token_ids(4, 8), token_ids(6, 9)]
    tails = [runner.new_tail(d) for d in docs]
    # A prompt row wanting every token's logits beside a prompt row wanting the last one's.
    got = run_rows(runner, [Row(docs[0], tails[0], prompts[0], want="all"), Row(docs[1], tails[1], prompts[1])])
    ref0 = runner.reference_logits(doc_ids[0] + prompts[0])[len(doc_ids[0]):]
    ref1 = runner.reference_logits(doc_ids[1] + prompts[1])[-1]
    torch.testing.assert_close(got[0], ref0, atol=FP32_ATOL, rtol=0)
    torch.testing.assert_close(got[1], ref1, atol=FP32_ATOL, rtol=0)
    toks = [int(got[0][-1].argmax()), int(got[1].argmax())]
    got = run_rows(runner, [Row(d, t, [n]) for d, t, n in zip(docs, tails, toks)])
    for ids, p, n, g in zip(doc_ids, prompts, toks, got):
        torch.testing.assert_close(g, runner.reference_logits(ids + p + [n])[-1], atol=FP32_ATOL, rtol=0)


def test_bad_rows_are_refused_and_leave_tails_unchanged(runner):
    doc = runner.prefill(token_ids(60, 10), progress=False)
    t1, t2 = runner.new_tail(doc), runner.new_tail(doc)
    run_rows(runner, [Row(doc, t1, token_ids(3, 11)), Row(doc, t2, token_ids(3, 12))])
    before = [(t.length, {l: x.clone() for l, x in t.k.items()}) for t in (t1, t2)]
    with pytest.raises(ValueError, match="same query tail twice"):
        run_rows(runner, [Row(doc, t1, [5]), Row(doc, t1, [6])])
    with pytest.raises(ValueError, match="out of range"):
        run_rows(runner, [Row(doc, t1, [5]), Row(doc, t2, [6], pages=(0, 99))])
    vocab = runner.model.config.vocab_size
    with pytest.raises(IndexError):  # a token past the embedding table fails the forward itself
        run_rows(runner, [Row(doc, t1, [5]), Row(doc, t2, [vocab + 3])])
    for t, (length, k) in zip((t1, t2), before):
        assert t.length == length and k.keys() == t.k.keys()
        assert all(torch.equal(k[l], t.k[l]) for l in k)
    with pytest.raises(ValueError, match="logit_ids"):
        Row(doc, t1, [5], logit_ids=[])
    with pytest.raises(ValueError, match="at least one token"):
        Row(doc, t1, [])


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_cpu_head_equals_lm_head(runner, rows):
    head = runner.model.lm_head
    hidden = torch.randn(rows, head.weight.shape[1], generator=torch.Generator().manual_seed(rows))
    runner.cpu_head_left = False
    want = runner.logits_from_hidden(hidden)
    runner.cpu_head_left = True
    got = runner.logits_from_hidden(hidden)
    assert got.shape == want.shape == (rows, head.weight.shape[0])
    torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)
