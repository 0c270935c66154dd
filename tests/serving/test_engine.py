"""LocalEngine: generation, streaming, option scoring, device cache, bad input (tiny model)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.engine import ContextNotLoadedError, LocalEngine
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import EmptyInputError
from agentctx.serving.types import GenerateRequest, ScoreRequest
from tests.factories import make_tiny_checkpoint


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("g"))
    return LocalEngine(load_model(path, device="cpu"), page_size=16, prefill_chunk_tokens=32)


DOC = "The supplier shall deliver 40 crates of apples to the buyer every Monday. " * 3


def test_generate_stream_and_dense_equivalence(engine):
    doc = engine.tokenize_document(DOC)
    res = engine.prefill("c1", doc, progress=False)
    assert res.num_tokens == len(doc.token_ids) and res.num_pages == -(-res.num_tokens // 16)
    req = GenerateRequest("c1", "Question: what?", max_new_tokens=12)
    full = engine.generate(req)
    assert len(full.token_ids) == 12 and full.finish_reason == "length"
    all_pages = engine.generate(GenerateRequest("c1", "Question: what?", pages=tuple(range(res.num_pages)),
                                                max_new_tokens=12))
    assert all_pages.token_ids == full.token_ids
    assert "".join(engine.stream(req)) == full.text
    assert full.attended_tokens == res.num_tokens and full.ttft_s <= full.total_s


def test_stop_strings_cut_text(engine):
    engine.prefill("c2", engine.tokenize_document(DOC), progress=False)
    full = engine.generate(GenerateRequest("c2", "Answer:", max_new_tokens=10))
    if len(full.text) > 2:
        stop = full.text[2]
        cut = engine.generate(GenerateRequest("c2", "Answer:", max_new_tokens=10, stop=(stop,)))
        assert cut.text == full.text[: full.text.index(stop)] and cut.finish_reason == "stop"


def test_score_matches_reference_logprobs(engine):
    doc = engine.tokenize_document(DOC)
    engine.prefill("c3", doc, progress=False)
    tok = engine.tokenizer
    prompt, options = " Risk:", (" low", " high", " medium risk")
    scores = engine.score(ScoreRequest("c3", prompt, options))
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    for opt, got in zip(options, scores):
        o_ids = tok(opt, add_special_tokens=False)["input_ids"]
        seq = doc.token_ids + p_ids + o_ids
        logp = torch.log_softmax(engine.runner.reference_logits(seq), -1)
        start = len(doc.token_ids) + len(p_ids)
        want = sum(float(logp[start - 1 + i, t]) for i, t in enumerate(o_ids))
        assert abs(got - want) < 1e-3


def test_bad_inputs_and_unknown_context(engine):
    with pytest.raises(EmptyInputError):
        engine.tokenize_document("   ")
    with pytest.raises(ContextNotLoadedError):
        engine.generate(GenerateRequest("missing", "hi"))
    engine.prefill("c4", engine.tokenize_document(DOC), progress=False)
    with pytest.raises(EmptyInputError):
        engine.generate(GenerateRequest("c4", ""))
    with pytest.raises(ValueError):
        engine.score(ScoreRequest("c4", "x", ()))
    # the context survives bad requests
    assert engine.generate(GenerateRequest("c4", "ok", max_new_tokens=2)).token_ids


def test_device_cache_evicts_lru_but_not_pinned(engine):
    small = LocalEngine(engine.runner.loaded, page_size=16, prefill_chunk_tokens=32, device_cache_bytes=1)
    small.prefill("a", small.tokenize_document(DOC), progress=False)
    small.prefill("b", small.tokenize_document(DOC), progress=False)
    assert not small.holds("a") and small.holds("b")


def test_static_query_mode_gives_the_eager_engines_results(engine):
    """The engine's generate (with stop strings and streaming) and option scoring (forked
    tails) through static query slots, the CUDA-graph path's forwards, run eagerly on CPU."""
    static = LocalEngine(engine.runner.loaded, page_size=16, prefill_chunk_tokens=32, query_mode="static")
    assert static.describe()["query_mode"] == "static" and engine.describe()["query_mode"] == "eager"
    assert static.describe()["fused_norms"] == 0  # auto: CUDA only
    doc = engine.tokenize_document(DOC)
    for e in (engine, static):
        e.prefill("s1", doc, progress=False)
    for pages in (None, (0, 2, 4)):
        req = GenerateRequest("s1", "Question: what?", pages=pages, max_new_tokens=12)
        want, got = engine.generate(req), static.generate(req)
        assert got.token_ids == want.token_ids and got.text == want.text
        assert "".join(static.stream(req)) == want.text
    sreq = ScoreRequest("s1", " Risk:", (" low", " high", " medium risk"))
    for a, b in zip(engine.score(sreq), static.score(sreq)):
        assert abs(a - b) < 1e-4
    kv = static.kv.get("s1")
    # the device-cache budget sees the slot buffers too
    assert kv.query_slots and static.cached_bytes() > sum(d.kv_bytes() for d in static.kv._docs.values())


def _is_span(seq, doc):
    n = len(seq)
    return any(doc[i : i + n] == seq for i in range(len(doc) - n + 1))


@pytest.mark.parametrize("mode", ["eager", "static"])
def test_copy_constraint_computes_only_allowed_logits_and_quotes_verbatim(engine, mode):
    """Copy-constrained decoding asks the runner for the allowed tokens' logits only; the
    tokens must equal masking the full logits, and form a span of the document."""
    e = engine if mode == "eager" else LocalEngine(engine.runner.loaded, page_size=16, prefill_chunk_tokens=32,
                                                   query_mode="static")
    doc = e.tokenize_document(DOC)
    e.prefill("q1", doc, progress=False)
    req = GenerateRequest("q1", "Quote:", pages=(0, 1, 2), max_new_tokens=20, constraint="copy")
    got = e.generate(req)
    assert got.token_ids and _is_span(got.token_ids, doc.token_ids)

    # reference: full logits, disallowed tokens at -inf
    kv, runner = e.kv.get("q1"), e.runner
    copy = e._copy_constraint(kv, [0, 1, 2])
    tail = runner.new_tail(kv)
    logits = runner.extend(kv, tail, e.tokenizer("Quote:", add_special_tokens=False)["input_ids"], [0, 1, 2])
    want = []
    for _ in range(20):
        masked = torch.full_like(logits, float("-inf"))
        ids = torch.tensor(copy.allowed_ids())
        masked[ids] = logits[ids]
        nxt = int(masked.argmax())
        if nxt in runner.stop_token_ids() or not copy.advance(nxt):
            break
        want.append(nxt)
        logits = runner.extend(kv, tail, [nxt], [0, 1, 2])
    assert got.token_ids == want


def test_logit_ids_select_rows_of_the_full_logits(engine):
    runner = engine.runner
    doc = engine.tokenize_document(DOC)
    engine.prefill("q2", doc, progress=False)
    kv = engine.kv.get("q2")
    ids = [5, 17, 99, 250]
    full = runner.extend(kv, runner.new_tail(kv), [40, 41, 42], [0, 2])
    part = runner.extend(kv, runner.new_tail(kv), [40, 41, 42], [0, 2], logit_ids=ids)
    torch.testing.assert_close(part, full[ids], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="logit_ids"):
        runner.extend(kv, runner.new_tail(kv), [40], [0], logit_ids=[])
    with pytest.raises(ValueError, match="logit_ids"):
        runner.extend(kv, runner.new_tail(kv), [40], [0], all_logits=True, logit_ids=[3])
