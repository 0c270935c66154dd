"""Batched decode across concurrent queries: ModelRunner.extend_batch against one-by-one
extend and transformers' own forward, and the engine's DecodeBatcher with real threads."""

from __future__ import annotations

import threading

import pytest
import torch

from agentctx.serving.decode_batcher import DecodeBatcher
from agentctx.serving.engine import LocalEngine
from agentctx.serving.model_loader import load_model
from agentctx.serving.model_runner import DecodeItem, ModelRunner
from agentctx.serving.types import GenerateRequest
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint

# fp32 on CPU: a batched matmul and a one-row matmul differ only by rounding.
FP32_ATOL = 1e-4


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def runner(request, tmp_path_factory):
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    return ModelRunner(load_model(path, device="cpu"), page_size=16, prefill_chunk_tokens=32)


def _ids(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 259, (n,), generator=g).tolist()


def _queries(runner):
    """Three queries over two documents: different prompt lengths, page sets, logit rows."""
    doc_a, doc_b = runner.prefill(_ids(150, 1), progress=False), runner.prefill(_ids(70, 2), progress=False)
    return [(doc_a, _ids(5, 3), None, None), (doc_a, _ids(9, 4), [0, 3, 7, 9], [5, 17, 40]),
            (doc_b, _ids(3, 5), [1, 2], None)]


def test_batched_decode_equals_one_query_at_a_time(runner):
    queries = _queries(runner)
    seq_tails = [runner.new_tail(d) for d, *_ in queries]
    bat_tails = [runner.new_tail(d) for d, *_ in queries]
    nxt = []
    for (d, prompt, pages, _), st, bt in zip(queries, seq_tails, bat_tails):
        a = runner.extend(d, st, prompt, pages)
        runner.extend(d, bt, prompt, pages)
        nxt.append(int(a.argmax()))
    for _ in range(4):
        want = [runner.extend(d, t, [n], pages, logit_ids=ids)
                for (d, _, pages, ids), t, n in zip(queries, seq_tails, nxt)]
        got = runner.extend_batch([DecodeItem(d, t, n, pages, ids)
                                   for (d, _, pages, ids), t, n in zip(queries, bat_tails, nxt)])
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, atol=FP32_ATOL, rtol=0)
        nxt = [int(w.argmax()) for w in want]
    assert [t.length for t in bat_tails] == [t.length for t in seq_tails]


def test_batched_decode_with_all_pages_matches_transformers(runner):
    doc_ids = [_ids(100, 6), _ids(45, 7)]
    docs = [runner.prefill(ids, progress=False) for ids in doc_ids]
    prompts = [_ids(4, 8), _ids(6, 9)]
    tails = [runner.new_tail(d) for d in docs]
    toks = [int(runner.extend(d, t, p).argmax()) for d, t, p in zip(docs, tails, prompts)]
    got = runner.extend_batch([DecodeItem(d, t, n) for d, t, n in zip(docs, tails, toks)])
    for ids, p, n, g in zip(doc_ids, prompts, toks, got):
        ref = runner.reference_logits(ids + p + [n])[-1]
        torch.testing.assert_close(g, ref, atol=FP32_ATOL, rtol=0)


def test_bad_batches_are_refused_and_leave_tails_unchanged(runner):
    doc = runner.prefill(_ids(60, 10), progress=False)
    t1, t2 = runner.new_tail(doc), runner.new_tail(doc)
    runner.extend(doc, t1, _ids(3, 11))
    runner.extend(doc, t2, _ids(3, 12))
    before = [(t.length, {l: x.clone() for l, x in t.k.items()}) for t in (t1, t2)]
    with pytest.raises(ValueError, match="same query tail twice"):
        runner.extend_batch([DecodeItem(doc, t1, 5), DecodeItem(doc, t1, 6)])
    with pytest.raises(ValueError, match="out of range"):
        runner.extend_batch([DecodeItem(doc, t1, 5), DecodeItem(doc, t2, 6, pages=[0, 99])])
    with pytest.raises(ValueError, match="non-empty"):
        runner.extend_batch([DecodeItem(doc, t1, 5, logit_ids=[])])
    for t, (length, k) in zip((t1, t2), before):
        assert t.length == length and k.keys() == t.k.keys()
        assert all(torch.equal(k[l], t.k[l]) for l in k)


def test_static_tails_are_refused(runner):
    static = ModelRunner(runner.loaded, page_size=16, prefill_chunk_tokens=32, query_mode="static")
    doc = static.prefill(_ids(40, 13), progress=False)
    tail = static.new_tail(doc)
    static.extend(doc, tail, _ids(3, 14))
    with pytest.raises(ValueError, match="eager"):
        static.extend_batch([DecodeItem(doc, tail, 5)])


# ---------------------------------------------------------------------------- the engine's batcher

@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    loaded = load_model(make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("g")), device="cpu")
    # A long gather window so that the concurrent generations below really share forwards.
    batched = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, decode_batch=8, decode_gather_s=0.2)
    alone = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, decode_batch=1)
    doc = batched.tokenize_document("The supplier shall deliver 40 crates of apples every Monday. " * 4)
    for e in (batched, alone):
        e.prefill("d", doc, progress=False)
    return batched, alone


def _concurrently(fn, args):
    results, errors = [None] * len(args), []

    def run(i, a):
        try:
            results[i] = fn(a)
        except Exception as exc:  # noqa: BLE001 - checked by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results, errors


def test_concurrent_generations_share_forwards_and_keep_their_tokens(engines):
    batched, alone = engines
    reqs = [GenerateRequest("d", "Question: who delivers?", max_new_tokens=10),
            GenerateRequest("d", "Q: what?", pages=(0, 2, 5), max_new_tokens=14),
            GenerateRequest("d", "Quote:", pages=(1, 3), max_new_tokens=12, constraint="copy"),
            GenerateRequest("d", "Summary", max_new_tokens=6, stop=("e",))]
    want = [alone.generate(r) for r in reqs]
    before = batched._batcher.stats.batches, batched._batcher.stats.steps
    got, errors = _concurrently(batched.generate, reqs)
    assert not errors
    for w, g in zip(want, got):
        assert g.token_ids == w.token_ids and g.text == w.text and g.finish_reason == w.finish_reason
    batches = batched._batcher.stats.batches - before[0]
    steps = batched._batcher.stats.steps - before[1]
    # Every generated token but a generation's last is one decode step (the prompt is not).
    assert steps == sum(len(w.token_ids) - (w.finish_reason == "length" or w.text != alone.tokenizer.decode(
        w.token_ids, skip_special_tokens=True)) for w in want)
    assert batches < steps  # some forwards carried several generations' steps
    info = batched.describe()["decode_batching"]
    assert info["largest"] >= 2 and alone.describe()["decode_batching"] is None


def test_a_failing_step_fails_only_its_own_generation(engines):
    batched, _ = engines
    good = GenerateRequest("d", "Question: who delivers?", max_new_tokens=8)
    bad = GenerateRequest("d", "Q:", pages=(0, 500), max_new_tokens=8)
    got, errors = _concurrently(batched.generate, [good, bad, good])
    assert len(errors) == 1 and "out of range" in str(errors[0])
    assert got[0].token_ids == got[2].token_ids and len(got[0].token_ids) == 8


def test_batcher_reruns_a_failed_batch_one_step_at_a_time():
    calls = []

    def run(items):
        calls.append(list(items))
        if len(items) > 1 or items[0] == "bad":
            raise ValueError(f"cannot run {items}")
        return [items[0].upper()]

    b = DecodeBatcher(run, max_batch=4, gather_s=0.5)
    results, errors = [None] * 3, []
    all_decoding = threading.Barrier(3)

    def worker(i, item):
        with b.decoding():
            all_decoding.wait()  # the first leader then waits for the other two steps
            try:
                results[i] = b.step(item)
            except ValueError as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=worker, args=(i, x)) for i, x in enumerate(["a", "bad", "c"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(r for r in results if r) == ["A", "C"] and errors == ["cannot run ['bad']"]
    assert max(len(c) for c in calls) == 3 and b.stats.fallbacks == 1


def test_batcher_refuses_bad_settings():
    with pytest.raises(ValueError, match="max_batch"):
        DecodeBatcher(lambda items: items, max_batch=0)
    with pytest.raises(ValueError, match="gather_s"):
        DecodeBatcher(lambda items: items, gather_s=-1)


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
