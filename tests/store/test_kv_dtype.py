"""``model.kv_dtype``: quantised pages through the real store (Ray object store + Redis), page ids
apart by KV dtype, a tiny Gemma replica answering over int8 pages, and auto unchanged.

Bounds come from ``kernels/kv_quant.py`` (tests/kernels/test_attend_quant.py checks the format
itself): int8 |x - x'| <= scale / 2; e4m3 half an ulp of 3 mantissa bits, or half the subnormal
step below 2^-6 scale.
"""

from __future__ import annotations

import pytest
import ray
import torch

from agentctx.config import ModelConfig
from agentctx.kernels.kv_quant import quantize_pages
from agentctx.kv_store.codec import PagePayload, decode_kv_quant, decode_payload, encode_tensor
from agentctx.kv_store.hashing import kv_namespace, page_hashes
from agentctx.serving.config import EngineConfig
from agentctx.serving.serve.replica import ModelReplica, encode_store_pages
from agentctx.serving.types import GenerateRequest

from .conftest import make_record

pytestmark = [pytest.mark.redis, pytest.mark.ray]

SHAPE = (2, 2, 16, 2, 8)  # (L_global, 2, P, Hkv, D)
TEXT = ("The Licensee shall give ninety (90) days written notice before terminating this Agreement. "
        "Fees are due within thirty days of each invoice; late payments accrue interest at 1.5% per month.")


def kv_pages(n: int, seed: int = 0) -> list[torch.Tensor]:
    """float32 pages whose keys have one 20x channel (what makes int8 keys need channel scales)."""
    g = torch.Generator().manual_seed(seed)
    pages = [torch.randn(SHAPE, generator=g) for _ in range(n)]
    for p in pages:
        p[:, 0, :, :, 3] *= 20
    return pages


def stored_payloads(store, page_ids: list[str]) -> list[PagePayload]:
    return ray.get(store._call(store._actor.get_refs, list(page_ids)))


def within_bound(kv_dtype: str, x: torch.Tensor, got: torch.Tensor, payload: PagePayload, valid: int) -> bool:
    """The first ``valid`` tokens of the page are within the format's elementwise bound."""
    q = decode_kv_quant(payload)
    scale = torch.stack([q.k_scale.expand_as(x[:, 0]), q.v_scale.expand_as(x[:, 1])], dim=1)[:, :, :valid]
    x, got = x[:, :, :valid], got[:, :, :valid]
    err, slack = (got - x).abs(), 1 + 1e-6
    bound = scale / 2 if kv_dtype == "int8" else torch.maximum(x.abs() / 16, scale * 2.0**-10)
    return bool(torch.all(err <= bound * slack + 1e-7))


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "int8"])
def test_quantised_pages_round_trip_through_the_store(make_store, tmp_path, kv_dtype):
    """Put as payloads, read back through a handle (dequantised, within kv_quant's bounds; the
    ragged last page's tail is stored as 0), then spilled, the store actor gone, read from disk."""
    spill_dir = tmp_path / "spill"
    store = make_store(spill_dir=spill_dir)
    pages = kv_pages(3)
    num_tokens = 2 * 16 + 5  # the last page holds 5 tokens and garbage after them
    pages[-1][:, :, 5:] = float("nan")
    payloads = encode_store_pages(pages, [0, 1, 2], num_tokens, 16, kv_dtype)
    ids = store.page_hashes(kv_namespace("m", kv_dtype), "acme", [[1], [2], [3]])
    assert store.put_pages(ids, payloads) == 3
    store.create_context(make_record("doc", "acme", ids))
    qname = "float8_e4m3fn" if kv_dtype == "fp8_e4m3" else "int8"
    with store.open("doc", "acme") as h:
        got = h.get_pages()
    for x, y, p in zip(pages, got, stored_payloads(store, ids)):
        assert p.kind == f"kvq-{qname}" and y.dtype == torch.float32 and y.shape == SHAPE
        assert torch.equal(y, decode_payload(p))
        valid = 5 if x is pages[-1] else 16
        assert within_bound(kv_dtype, x, y, p, valid)
        assert torch.all(y[:, :, valid:] == 0)
    # The default granularities (kv_quant.DEFAULT_GRANULARITY): fp8 token_head both; int8 K channel.
    q = decode_kv_quant(stored_payloads(store, ids[:1])[0])
    want_k = (2, 1, 2, 8) if kv_dtype == "int8" else (2, 16, 2, 1)
    assert tuple(q.k_scale.shape) == want_k and tuple(q.v_scale.shape) == (2, 16, 2, 1)
    k_ref = quantize_pages(pages[0][:, 0], "int8" if kv_dtype == "int8" else "fp8", part="k")
    assert torch.equal(q.data[:, 0].view(torch.uint8), k_ref.data.view(torch.uint8))
    # Disk tier: one buffer per page, so the spill file format needs nothing new.
    assert store.spill_context("doc", "acme")["pages_written"] == 3
    namespace = store.namespace
    store.shutdown(kill_actor=True)
    store2 = make_store(namespace=namespace, spill_dir=spill_dir)
    with store2.open("doc", "acme") as h:
        assert all(torch.equal(a, b) for a, b in zip(h.get_pages(), got))


def test_bytes_per_page_and_old_formats_readable():
    """A Gemma 3 270M page (3 global layers, 256 tokens, Hkv 1, D 256): fp8 / int8 store 399,360
    bytes, 1.97x fewer than bf16 and 3.94x fewer than float32; raw and legacy int8 payloads decode."""
    page = torch.randn(3, 2, 256, 1, 256)
    raw32, raw16 = encode_tensor(page).nbytes, encode_tensor(page.bfloat16()).nbytes
    for kv_dtype in ("fp8_e4m3", "int8"):
        (p,) = encode_store_pages([page], [0], 256, 256, kv_dtype)
        assert p.nbytes == 3 * 2 * 256 * 256 + 2 * 3 * 256 * 4 == 399_360
        assert raw16 / p.nbytes > 1.95 and raw32 / p.nbytes > 3.9
    assert torch.equal(decode_payload(encode_tensor(page)), page)
    legacy = encode_tensor(page, quantize=True)
    assert legacy.kind == "int8" and decode_payload(legacy).shape == page.shape


def test_page_ids_differ_by_kv_dtype():
    """auto keeps the ids published before the setting; each stored dtype hashes apart."""
    doc = [[1, 2, 3], [4, 5, 6]]
    ids = {k: page_hashes(kv_namespace("gemma3-270m", k), "acme", doc) for k in ("auto", "bf16", "fp8_e4m3", "int8")}
    assert ids["auto"] == page_hashes("gemma3-270m", "acme", doc)
    flat = [p for v in ids.values() for p in v]
    assert len(set(flat)) == len(flat)


def test_kv_dtype_config_checks():
    assert ModelConfig().engine_config().kv_dtype == "auto"
    assert ModelConfig(kv_dtype="fp8_e4m3").engine_config().kv_dtype == "fp8_e4m3"
    with pytest.raises(ValueError, match="kv_dtype"):
        ModelConfig(kv_dtype="fp4")
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        EngineConfig(kv_dtype="e5m2")
    with pytest.raises(ValueError, match="needs engine local"):
        EngineConfig(engine="vllm", kv_dtype="int8")


# -- a replica over the tiny Gemma 3 (2 global + 2 sliding layers, 16-token pages) -----------------

def make_replica(store, ckpt, kv_dtype: str) -> ModelReplica:
    cfg = EngineConfig(path=str(ckpt), page_size=16, prefill_chunk_tokens=32, device="cpu", dtype="float32",
                       query_mode="eager", kv_dtype=kv_dtype)
    return ModelReplica(cfg, store=store)


def logits_over(replica: ModelReplica, kv, prompt: list[int]) -> torch.Tensor:
    runner = replica.engine.runner
    with torch.inference_mode():
        return runner.extend(kv, runner.new_tail(kv), prompt, None, all_logits=True)


@pytest.fixture
def replicas(make_store, tiny_ckpt):
    store = make_store()
    made = {k: make_replica(store, tiny_ckpt, k) for k in ("auto", "int8")}
    yield store, made
    for r in made.values():
        r.engine.close()


def test_int8_context_answers_and_stays_near_the_unquantised_run(replicas):
    """Prefilled with kv_dtype int8 (int8 pages on the device, shipped to the store as they are),
    dropped from the engine, loaded back from the store as int8 pages: a greedy query answers with
    the unquantised run's tokens, and with every page selected its logits are within 1 % (relative
    L2, each prompt position; measured 0.13 % when only the store was quantised) of the float32 pages'."""
    store, reps = replicas
    rep = reps["int8"]
    doc = rep.tokenize_document(TEXT)
    rep.prefill_context("c8", "acme", doc, progress=False)
    rec = store.get_record("c8", "acme")
    assert rec.extra["kv_dtype"] == "int8"
    assert all(p.kind == "kvq-int8" for p in stored_payloads(store, rec.page_ids))
    assert not set(rec.page_ids) & set(store.page_hashes(rep.model_id, "acme", [doc.token_ids[:16]]))
    runner = rep.engine.runner
    assert runner.kv_quant == torch.int8  # the device holds int8 pages too (serving/runner/quant_kv.py)
    runner.kv_quant = None
    try:
        ref = runner.prefill(doc.token_ids, progress=False)  # float32 pages, never stored
    finally:
        runner.kv_quant = torch.int8
    assert rep.drop_context("c8")
    prompt = "When is notice due?"
    res = rep.generate(GenerateRequest("c8", prompt, max_new_tokens=8, tenant="acme", ignore_eos=True))
    assert rep.engine.stats["loads"] == 1 and len(res.token_ids) == 8
    loaded = rep.engine.kv.get("c8")
    assert loaded.quantized and loaded.kv_dtype == torch.int8  # loaded as stored, not dequantised
    ids = rep.engine.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    got, want = logits_over(rep, loaded, ids), logits_over(rep, ref, ids)
    rel = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item()
    assert 0 < rel < 0.01, rel
    # Greedy over the float32 pages gives the same tokens (the scheduler's path vs the runner's).
    from tests.factories import greedy_tokens

    assert greedy_tokens(rep.engine.runner, ref, ids, max_new_tokens=8, stop_ids=set()) == res.token_ids


def test_auto_is_byte_identical_and_restore_republishes_quantised(replicas, make_store, tiny_ckpt):
    """auto: the model id's page ids, raw payloads equal to the engine's pages byte for byte, the
    same KV after a load. int8: a restore after the store actor is gone republishes int8 pages
    under the same ids."""
    store, reps = replicas
    rep = reps["auto"]
    doc = rep.tokenize_document(TEXT)
    rep.prefill_context("ca", "acme", doc, progress=False)
    rec = store.get_record("ca", "acme")
    P = 16
    assert rec.page_ids == store.page_hashes(rep.model_id, "acme",
                                             [doc.token_ids[i:i + P] for i in range(0, len(doc.token_ids), P)])
    assert "kv_dtype" not in rec.extra
    _, pages, _ = rep.engine.export("ca")
    payloads = stored_payloads(store, rec.page_ids)
    assert all(p.kind == "raw" and p.dtype == "float32" for p in payloads)
    assert all(torch.equal(decode_payload(p).view(torch.uint8), t.view(torch.uint8)) for p, t in zip(payloads, pages))
    before = rep.engine.kv.get("ca")
    assert rep.drop_context("ca")
    rep.generate(GenerateRequest("ca", "Fees?", max_new_tokens=2, tenant="acme"))
    after = rep.engine.kv.get("ca")
    assert all(torch.equal(before.k_pages[l], after.k_pages[l]) and torch.equal(before.v_pages[l], after.v_pages[l])
               for l in before.k_pages)
    # Stored int8 pages are ~3.9x smaller than these float32 ones (D 32: scales are 1/8 of it).
    q8 = reps["int8"]
    q8.prefill_context("cq", "acme", doc, progress=False)
    rec_q = store.get_record("cq", "acme")
    assert rec_q.page_bytes[0] * 3 < rec.page_bytes[0]
    # The store actor and its objects go (Redis keeps the directory): restore re-prefills, republishes int8.
    namespace = store.namespace
    store.shutdown(kill_actor=True)
    store2 = make_store(namespace=namespace)
    rep2 = make_replica(store2, tiny_ckpt, "int8")
    try:
        out = rep2.restore_context("cq", "acme")
        assert out.prefilled and out.pages_put == len(rec_q.page_ids)
        assert all(p.kind == "kvq-int8" for p in stored_payloads(store2, rec_q.page_ids))
    finally:
        rep2.engine.close()
