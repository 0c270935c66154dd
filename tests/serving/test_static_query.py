"""Static-slot query forwards (the CUDA-graph path's math, run eagerly on CPU) against the eager path.

The static path replaces growing tail tensors with preallocated slots, padded token
buckets, device-side masks and a fixed-width block table; with the same pages it must
give the same logits as the eager path (fp32, rounding only) and transformers' forward.
"""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner
from agentctx.serving.runner.static_query import BUCKETS, bucket_for, table_width
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint

FP32_ATOL = 1e-4


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def pair(request, tmp_path_factory):
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    loaded = load_model(path, device="cpu")
    kw = dict(page_size=16, prefill_chunk_tokens=32, max_context_tokens=4096)
    return (ModelRunner(loaded, query_mode="eager", **kw),
            ModelRunner(loaded, query_mode="static", static_tail_tokens=2 * BUCKETS[-1] + 64, **kw))


def _ids(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 259, (n,), generator=g).tolist()


def test_buckets_and_widths():
    assert [bucket_for(n) for n in (1, 2, 8, 9, 33, 256)] == [1, 8, 8, 16, 64, 256]
    assert table_width(1) == 16 and table_width(16) == 16
    for m in (17, 100, 492, 4096, 5000):
        w = table_width(m)
        assert m <= w <= m * 1.125 + 1, (m, w)


@pytest.mark.parametrize("pages", [None, [0, 3, 5]])
def test_static_matches_eager_prompt_and_decode(pair, pages):
    eager, static = pair
    doc_ids, q_ids = _ids(100, 1), _ids(11, 2)  # 11 tokens: padded to the 16 bucket
    doc = eager.prefill(doc_ids, progress=False)
    te, ts = eager.new_tail(doc), static.new_tail(doc)
    want = eager.extend(doc, te, q_ids, pages, all_logits=True)
    got = static.extend(doc, ts, q_ids, pages, all_logits=True)
    assert ts.static is not None and not ts.k  # it really took the static path
    torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)
    # 6 greedy decode steps (bucket 1): same tokens, same logits
    nxt = int(want[-1].argmax())
    for _ in range(6):
        le = eager.extend(doc, te, [nxt], pages)
        ls = static.extend(doc, ts, [nxt], pages)
        torch.testing.assert_close(ls, le, atol=FP32_ATOL, rtol=0)
        nxt = int(le.argmax())
    assert ts.length == te.length == 17


def test_static_all_pages_matches_transformers(pair):
    _, static = pair
    doc_ids, q_ids = _ids(161, 3), _ids(7, 4)  # ragged last page
    ref = static.reference_logits(doc_ids + q_ids)
    doc = static.prefill(doc_ids, progress=False)
    got = static.extend(doc, static.new_tail(doc), q_ids, None, all_logits=True)
    torch.testing.assert_close(got, ref[161:], atol=FP32_ATOL, rtol=0)


def test_long_prompt_is_chunked_then_tail_moves_to_eager(pair):
    eager, static = pair
    doc_ids = _ids(64, 5)
    q_ids = _ids(BUCKETS[-1] + 40, 6)  # two chunks: 256 + 40 (bucket 64)
    doc = eager.prefill(doc_ids, progress=False)
    te, ts = eager.new_tail(doc), static.new_tail(doc)
    want = eager.extend(doc, te, q_ids, [1, 2])
    got = static.extend(doc, ts, q_ids, [1, 2])
    torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)
    assert ts.static is not None
    # The next extend would overrun the slots (capacity 576 = 296 + 256 + 24 left): the
    # tail is copied out to the eager form and continues exactly.
    more = _ids(60, 7)
    torch.testing.assert_close(static.extend(doc, ts, more, [1, 2]), eager.extend(doc, te, more, [1, 2]),
                               atol=FP32_ATOL, rtol=0)
    assert ts.static is None and ts.k


def test_forks_share_a_prefix(pair):
    """Scoring options: each fork continues from the same prefix, one after another."""
    eager, static = pair
    doc = eager.prefill(_ids(80, 8), progress=False)
    prompt, a, b = _ids(9, 9), _ids(3, 10), _ids(5, 11)
    be, bs = eager.new_tail(doc), static.new_tail(doc)
    eager.extend(doc, be, prompt, [0, 4])
    static.extend(doc, bs, prompt, [0, 4])
    for opt in (a, b, a):
        want = eager.extend(doc, be.fork(), opt, [0, 4], all_logits=True)
        got = static.extend(doc, bs.fork(), opt, [0, 4], all_logits=True)
        torch.testing.assert_close(got, want, atol=FP32_ATOL, rtol=0)


def test_stale_tail_fails_loudly(pair):
    _, static = pair
    doc = static.prefill(_ids(50, 12), progress=False)
    first = static.new_tail(doc)
    static.extend(doc, first, _ids(4, 13), [0, 1])
    second = static.new_tail(doc)
    static.extend(doc, second, _ids(4, 14), [0, 2])  # same table width: takes the same slots
    with pytest.raises(RuntimeError, match="stale"):
        static.extend(doc, first, [5], [0, 1])
    # the newer query is unaffected
    static.extend(doc, second, [5], [0, 2])
    assert second.length == 5


def test_bad_pages_rejected_before_anything_is_written(pair):
    _, static = pair
    doc = static.prefill(_ids(40, 15), progress=False)
    tail = static.new_tail(doc)
    with pytest.raises(ValueError, match="out of range"):
        static.extend(doc, tail, [5], pages=[9])
    assert tail.length == 0 and tail.static is None


def test_bad_modes():
    with pytest.raises(ValueError, match="query_mode"):
        ModelRunner.__init__(object.__new__(ModelRunner), None, query_mode="fast")


def test_slot_buffers_are_counted_and_bounded(pair):
    _, static = pair
    doc = static.prefill(_ids(840, 16), progress=False)  # 53 pages of 16
    assert doc.device_bytes() == doc.kv_bytes()
    widths = []
    for m in (10, 17, 20, 30, 40, 50):  # table widths 16, 18, 20, 30, 40, 52
        static.extend(doc, static.new_tail(doc), [5], list(range(m)))
        widths.append(table_width(m))
    assert len(set(widths)) == 6
    assert list(doc.query_slots) == widths[-4:]  # at most 4 sets per document, least recent dropped
    per = next(iter(doc.query_slots.values())).nbytes()
    assert per > 0 and doc.device_bytes() == doc.kv_bytes() + per * len(doc.query_slots)


def test_failed_capture_falls_back_to_the_static_forward(pair, caplog):
    """A capture that cannot happen (here: no CUDA at all) is recorded once, logged, and the
    bucket keeps running the static forward eagerly with the same results."""
    eager, static = pair
    doc = eager.prefill(_ids(60, 20), progress=False)
    static.query_mode = "graph"  # bypasses the constructor's CUDA check on purpose
    try:
        te, tg = eager.new_tail(doc), static.new_tail(doc)
        with caplog.at_level("WARNING", logger="agentctx.serving.runner.static_query"):
            for step in ([7, 8, 9], [10], [11]):
                torch.testing.assert_close(static.extend(doc, tg, step, [0, 2]), eager.extend(doc, te, step, [0, 2]),
                                           atol=FP32_ATOL, rtol=0)
    finally:
        static.query_mode = "static"
    qs = tg.static.slots
    assert not qs.graphs and set(qs.failed) == {1, 8}
    assert sum("capture" in r.getMessage() for r in caplog.records) == 2  # once per bucket, not per step
