"""Resumable prefill (serving/serve/checkpoint.py) through the real store (Ray object store + Redis).

A prefill cut off after k chunks (``on_chunk`` raising, as a killed job would stop) leaves a
checkpoint: its pages under their content ids, the sliding window, a lease and a note. The next
prefill of the same document resumes there and computes only the remaining tokens; pages and
window come out bit-identical to an uninterrupted prefill (``torch.equal``: fp32 on CPU, same
chunks, so every chunk reads exactly what it read before), and so do greedy answers. Another text
or page namespace never resumes from it, and an abandoned one frees its pages when it expires.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from agentctx.kv_store import ContextNotFoundError
from agentctx.serving.config import EngineConfig
from agentctx.serving.engine import LocalEngine
from agentctx.serving.serve.checkpoint import PrefillCheckpoint, checkpoint_key
from agentctx.serving.serve.replica import ModelReplica
from agentctx.serving.types import GenerateRequest

pytestmark = [pytest.mark.redis, pytest.mark.ray]

CLAUSES = " ".join(f"Clause {i}: the supplier shall deliver item {i * 7 % 13} to depot {i % 5} on day {i}."
                   for i in range(110))
QUESTION = "Question: what does clause 3 say the supplier delivers? Answer:"


class Interrupted(Exception):
    """What the tests raise from on_chunk to cut a prefill off after some chunks."""


def stop_at(tokens: int):
    def on_chunk(done: int, total: int) -> None:
        if done >= tokens:
            raise Interrupted(done)
    return on_chunk


def note_of(rep: ModelReplica, context_id: str, tenant: str, doc) -> PrefillCheckpoint | None:
    P = rep.engine.page_size
    pages = [doc.token_ids[i:i + P] for i in range(0, len(doc.token_ids), P)]
    last = rep.store.page_hashes(rep.page_namespace, tenant, pages)[-1]
    text = rep.store.get_checkpoint(checkpoint_key(context_id, last), tenant)
    return None if text is None else PrefillCheckpoint.from_json(text)


def interrupted(rep: ModelReplica, context_id: str, doc, tokens: int) -> PrefillCheckpoint:
    """Prefill ``doc`` until ``tokens`` are done, then cut it off: its checkpoint."""
    with pytest.raises(Interrupted):
        rep.prefill_context(context_id, "acme", doc, progress=False, on_chunk=stop_at(tokens))
    with pytest.raises(ContextNotFoundError):
        rep.store.get_record(context_id, "acme")
    note = note_of(rep, context_id, "acme", doc)
    assert note is not None and note.done == tokens
    return note


def assert_same_kv(engine, context_id: str, ref) -> None:
    """The engine's KV of the context equals ``ref`` (a DocKV) bit for bit."""
    num_tokens, pages, window = engine.export(context_id)
    assert num_tokens == ref.num_tokens and len(pages) == ref.num_pages
    assert all(torch.equal(p, ref.page_tensor(i)) for i, p in enumerate(pages))
    want = ref.window_tensor()
    assert (window is None) == (want is None) and (window is None or torch.equal(window, want))


# --------------------------------------------------------------------------- the real Gemma 3 270M
GEMMA = EngineConfig(page_size=128, prefill_chunk_tokens=256, device="cpu", query_mode="eager",
                     prefill_checkpoint_s=0.0)


@pytest.fixture(scope="module")
def gemma():
    engine = LocalEngine(None, page_size=128, prefill_chunk_tokens=256, device="cpu", query_mode="eager")
    yield engine
    engine.close()


@pytest.mark.model
def test_gemma_prefill_cut_off_resumes_bit_identical(gemma, make_store):
    """(a) cut off after 3 chunks (768 tokens, past the 512-token window), resumed by another
    replica: pages and window bit-identical to an uninterrupted prefill, the same greedy answer
    (also after the context is loaded back from the store); (b) only the remaining tokens are
    computed and progress starts at the checkpoint."""
    store = make_store()
    rep = ModelReplica(GEMMA, store=store, engine=gemma)
    doc = rep.tokenize_document(CLAUSES)
    n = len(doc.token_ids)
    assert 1200 < n < 2500
    note = interrupted(rep, "g", doc, 768)
    assert len(note.page_ids) == 6 and note.window_id is not None
    assert store.refcounts(note.page_ids + [note.window_id]) == [1] * 7  # held by the checkpoint's lease
    assert not gemma.holds("g")

    other = ModelReplica(GEMMA, store=store, engine=gemma)  # a restarted replica: nothing cached
    computed, seen = gemma.stats["prefill_tokens"], []
    res = other.prefill_context("g", "acme", doc, progress=False, on_chunk=lambda d, t: seen.append(d))
    assert res.resumed_tokens == 768 and gemma.stats["prefill_tokens"] - computed == n - 768
    assert seen[0] == 768 and seen[-1] == n
    assert note_of(rep, "g", "acme", doc) is None  # published: the note is gone, its lease released
    rec = store.get_record("g", "acme")
    assert rec.page_ids[:6] == note.page_ids and store.refcounts(rec.page_ids) == [0] * len(rec.page_ids)
    deadline = time.monotonic() + 5
    while store.has_pages([note.window_id])[0] and time.monotonic() < deadline:
        time.sleep(0.02)  # the window object goes with the lease (a fire-and-forget free)
    assert not store.has_pages([note.window_id])[0]

    ref = gemma.runner.prefill(doc.token_ids, progress=False)  # uninterrupted, same chunks
    assert_same_kv(gemma, "g", ref)
    plain = ModelReplica(dataclasses.replace(GEMMA, prefill_checkpoint_s=None), store=store, engine=gemma)
    plain.prefill_context("g-ref", "acme", doc, progress=False)
    ask = lambda cid: rep.generate(GenerateRequest(cid, QUESTION, max_new_tokens=12, tenant="acme",  # noqa: E731
                                                   ignore_eos=True)).token_ids
    want = ask("g-ref")
    assert ask("g") == want
    assert rep.drop_context("g")
    assert ask("g") == want and gemma.stats["loads"] >= 1  # from the published pages and window blob


@pytest.mark.model
def test_gemma_checkpoint_of_another_text_or_namespace_is_ignored(gemma, make_store):
    """(c) A checkpoint is found only by its own document and page namespace: a changed first
    clause or kv_dtype bf16 prefills from token 0; the document itself still resumes after."""
    store = make_store()
    rep = ModelReplica(GEMMA, store=store, engine=gemma)
    text = CLAUSES[:3000]
    doc = rep.tokenize_document(text)
    n = len(doc.token_ids)
    assert n > 3 * 256
    interrupted(rep, "c", doc, 512)

    changed = rep.tokenize_document(text.replace("Clause 0:", "Clause zero:", 1))
    res = rep.prefill_context("c", "acme", changed, progress=False)
    assert res.resumed_tokens == 0 and res.num_tokens == len(changed.token_ids)
    store.delete_context("c", "acme")
    bf16 = ModelReplica(dataclasses.replace(GEMMA, kv_dtype="bf16"), store=store, engine=gemma)
    assert bf16.page_namespace != rep.page_namespace
    computed = gemma.stats["prefill_tokens"]
    assert bf16.prefill_context("c", "acme", doc, progress=False).resumed_tokens == 0
    assert gemma.stats["prefill_tokens"] - computed == n
    store.delete_context("c", "acme")
    assert note_of(rep, "c", "acme", doc).done == 512  # untouched by either
    assert note_of(rep, "c", "other-tenant", doc) is None
    assert rep.prefill_context("c", "acme", doc, progress=False).resumed_tokens == 512


# --------------------------------------------------------------------------- tiny random models
def tiny(path, store, **kw) -> ModelReplica:
    cfg = EngineConfig(path=str(path), page_size=16, prefill_chunk_tokens=32, device="cpu", query_mode="eager",
                       prefill_checkpoint_s=0.0, **kw)
    return ModelReplica(cfg, store=store)


def test_abandoned_checkpoint_frees_its_pages_when_it_expires(tiny_ckpt, make_store):
    """(d) Nobody resumes: after the TTL the note is gone and the reaper frees its pages and window;
    the next prefill starts from 0."""
    store = make_store()
    rep = tiny(tiny_ckpt, store, prefill_checkpoint_ttl_s=0.5)
    try:
        doc = rep.tokenize_document(CLAUSES[:400])
        note = interrupted(rep, "x", doc, 128)
        held = note.page_ids + [note.window_id]
        assert len(held) == 9 and store.has_pages(held) == [True] * 9 and store.refcounts(held) == [1] * 9
        time.sleep(0.8)
        assert note_of(rep, "x", "acme", doc) is None
        store.reap_expired()
        assert store.has_pages(held) == [False] * 9 and store.refcounts(held) == [0] * 9
        assert rep.prefill_context("x", "acme", doc, progress=False).resumed_tokens == 0
    finally:
        rep.engine.close()


def test_llama_without_sliding_layers_resumes_bit_identical(tmp_path, make_store):
    """A model with global layers only: the checkpoint holds pages and no window."""
    from tests.factories import make_tiny_checkpoint

    store = make_store()
    rep = tiny(make_tiny_checkpoint("llama", tmp_path / "llama"), store)
    try:
        assert not rep.engine.needs_window
        doc = rep.tokenize_document(CLAUSES[:500])
        n = len(doc.token_ids)
        note = interrupted(rep, "l", doc, 256)
        assert note.window_id is None and len(note.page_ids) == 16
        computed = rep.engine.stats["prefill_tokens"]
        assert rep.prefill_context("l", "acme", doc, progress=False).resumed_tokens == 256
        assert rep.engine.stats["prefill_tokens"] - computed == n - 256
        assert_same_kv(rep.engine, "l", rep.engine.runner.prefill(doc.token_ids, progress=False))
    finally:
        rep.engine.close()


def test_restore_cut_off_resumes_after_the_store_actor_restarts(tiny_ckpt, make_store):
    """The restore path: the store actor (and every page) gone, Redis kept; the re-prefill is cut
    off, and the next restore resumes from its checkpoint and puts back identical pages."""
    store = make_store()
    rep = tiny(tiny_ckpt, store)
    try:
        doc = rep.tokenize_document(CLAUSES[:400])
        n = len(doc.token_ids)
        rep.prefill_context("r", "acme", doc, progress=False)
        ref = rep.engine.runner.prefill(doc.token_ids, progress=False)
        namespace = store.namespace
        store.shutdown(kill_actor=True)
        store2 = make_store(namespace=namespace)
        rep2 = tiny(tiny_ckpt, store2)
        with pytest.raises(Interrupted):
            rep2.restore_context("r", "acme", on_chunk=stop_at(96))
        computed = rep2.engine.stats["prefill_tokens"]
        out = rep2.restore_context("r", "acme")
        assert out.prefilled and out.pages_put == -(-n // 16) - 6  # the checkpoint's 6 pages were there
        assert rep2.engine.stats["prefill_tokens"] - computed == n - 96
        assert rep2.engine.stats["resumed_tokens"] == 96
        assert_same_kv(rep2.engine, "r", ref)
        rec = store2.get_record("r", "acme")
        assert store2.has_pages(rec.page_ids) == [True] * len(rec.page_ids)
        assert store2.refcounts(rec.page_ids) == [0] * len(rec.page_ids)  # the checkpoint's lease is gone
        rep2.engine.close()
    finally:
        rep.engine.close()


def test_checkpoint_whose_pages_went_with_the_store_actor_starts_over(tiny_ckpt, make_store):
    """Redis keeps the note, the object store lost its pages: the prefill starts from token 0, and
    its own checkpoints replace the stale note."""
    store = make_store()
    rep = tiny(tiny_ckpt, store)
    try:
        doc = rep.tokenize_document(CLAUSES[:400])
        interrupted(rep, "s", doc, 128)
        namespace = store.namespace
        store.shutdown(kill_actor=True)
        rep2 = tiny(tiny_ckpt, make_store(namespace=namespace))
        res = rep2.prefill_context("s", "acme", doc, progress=False)
        assert res.resumed_tokens == 0 and rep2.engine.stats["prefill_tokens"] == len(doc.token_ids)
        assert note_of(rep2, "s", "acme", doc) is None
        rep2.engine.close()
    finally:
        rep.engine.close()


def test_quantised_pages_checkpoint_and_resume_as_held(tiny_ckpt, make_store):
    """A replica holding int8 pages (model.kv_dtype int8) checkpoints them as it holds them (values
    and scales, no dequantise trip) and resumes from them: the resumed document equals an
    uninterrupted int8 prefill byte for byte, window included."""
    store = make_store()
    rep = tiny(tiny_ckpt, store, kv_dtype="int8")
    other = tiny(tiny_ckpt, store, kv_dtype="int8")  # a restarted replica: nothing cached
    try:
        assert rep.engine.pages_quantized
        doc = rep.tokenize_document(CLAUSES[:400])
        n = len(doc.token_ids)
        assert n > 3 * 32
        interrupted(rep, "q", doc, 96)
        res = other.prefill_context("q", "acme", doc, progress=False)
        assert res.resumed_tokens == 96 and res.num_tokens == n
        ref = other.engine.runner.prefill(doc.token_ids, progress=False)  # uninterrupted, same chunks
        num_tokens, pages, window = other.engine.export("q")
        assert num_tokens == n and len(pages) == ref.num_pages
        for i, page in enumerate(pages):
            want = ref.page_tensor(i)
            assert page.data.dtype == torch.int8
            assert torch.equal(page.data, want.data) and torch.equal(page.k_scale, want.k_scale) \
                and torch.equal(page.v_scale, want.v_scale)
        assert torch.equal(window, ref.window_tensor())
    finally:
        rep.engine.close()
        other.engine.close()
