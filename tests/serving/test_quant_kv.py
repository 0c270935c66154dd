"""Document pages held quantised on the device (model.kv_dtype fp8_e4m3 / int8; serving/runner/quant_kv.py).

Tiny random-weight models for the exact state: the bytes a quantised DocKV holds, its store unit
both ways without requantising, prefill quantising each page once, every query path (eager
packed rows, static slots, batched union rows) against the same pages dequantised; and the real
Gemma 3 270M engine with int8 pages end to end against its float run.
"""

from __future__ import annotations

import pytest
import torch

from agentctx.kernels.kv_quant import quantize_pages
from agentctx.kv_store.codec import QuantKVPage, decode_kv_quant
from agentctx.serving.runner.batch_forward import Row, release, run_rows
from agentctx.serving.runner.paged_kv import DocKV
from agentctx.serving.serve.replica import encode_store_pages
from tests.factories import dequantized_copy as float_copy
from tests.factories import tiny_runner, token_ids


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    return tiny_runner("gemma3_text", tmp_path_factory.mktemp("g"), query_mode="eager", kv_dtype="int8")


@pytest.mark.parametrize("kv_dtype,qdtype", [("int8", torch.int8), ("fp8_e4m3", torch.float8_e4m3fn)])
def test_allocate_holds_values_and_scales_at_a_quarter_of_float32(tmp_path, kv_dtype, qdtype):
    runner = tiny_runner("llama", tmp_path, kv_dtype=kv_dtype)
    doc = runner.prefill(token_ids(70, 0), progress=False)  # 5 pages, the last of 6 tokens
    float_doc = tiny_runner("llama", tmp_path / "f").prefill(token_ids(70, 0), progress=False)
    assert doc.quantized and doc.kv_dtype == qdtype and doc.float_dtype == torch.float32
    lay = runner.layout
    values = 2 * len(lay.global_layers) * 5 * 16 * lay.num_kv_heads * lay.head_dim
    scales = sum(t.numel() for t in (*doc.k_scales.values(), *doc.v_scales.values()))
    assert doc.kv_bytes() == values + 4 * scales and float_doc.kv_bytes() == 4 * values
    # kv_quant's defaults: fp8 per token and head; int8 K per channel, V per token and head.
    k_scale = (5, 1, 2, 16) if kv_dtype == "int8" else (5, 16, 2, 1)
    assert tuple(doc.k_scales[0].shape) == k_scale and tuple(doc.v_scales[0].shape) == (5, 16, 2, 1)
    # The ragged last page: its 10 unused tokens are stored as 0.
    assert torch.all(doc.k_pages[0][-1, 6:].float() == 0)


def test_prefill_quantises_each_page_once_from_its_float_values(tmp_path):
    """Page 0 is computed before any quantised KV is read, so it equals kv_quant of the float run's page 0."""
    ids = token_ids(40, 1)
    doc = tiny_runner("llama", tmp_path, kv_dtype="int8").prefill(ids, progress=False)
    ref = tiny_runner("llama", tmp_path / "f").prefill(ids, progress=False)
    for l in doc.k_pages:
        want = quantize_pages(ref.k_pages[l][:1], "int8", part="k")
        assert torch.equal(doc.k_pages[l][:1], want.data) and torch.equal(doc.k_scales[l][:1], want.scale)


def test_store_unit_ships_the_device_bytes_and_loads_them_back(gemma):
    doc = gemma.prefill(token_ids(50, 2), progress=False)
    units = [doc.page_tensor(i) for i in range(doc.num_pages)]
    assert all(isinstance(u, QuantKVPage) and u.data.dtype == torch.int8 for u in units)
    payloads = encode_store_pages(units, list(range(len(units))), doc.num_tokens, 16, "int8")
    back = [decode_kv_quant(p) for p in payloads]
    assert all(torch.equal(a.data, b.data) and torch.equal(a.k_scale, b.k_scale) for a, b in zip(units, back))
    with pytest.raises(ValueError, match="cannot be stored"):
        encode_store_pages(units, list(range(len(units))), doc.num_tokens, 16, "fp8_e4m3")
    again = DocKV.from_tensors(doc.layout, 16, doc.num_tokens, back, doc.window_tensor(), kv_dtype=torch.int8)
    for l in doc.k_pages:
        assert torch.equal(again.k_pages[l], doc.k_pages[l]) and torch.equal(again.v_scales[l], doc.v_scales[l])
    assert again.compute_dtype == torch.float32
    # Float store pages (a replica that held float pages) are quantised on load, page by page.
    floats = DocKV.from_tensors(doc.layout, 16, doc.num_tokens, [u.dequantize() for u in units], doc.window_tensor(),
                                kv_dtype=torch.int8)
    for l in doc.k_pages:
        torch.testing.assert_close(floats.flat(l)[0], doc.flat(l)[0], atol=1e-6, rtol=0.01)
    # A float device takes quantised store pages dequantised.
    plain = DocKV.from_tensors(doc.layout, 16, doc.num_tokens, back, doc.window_tensor())
    l = next(iter(doc.k_pages))
    assert not plain.quantized and torch.equal(plain.k_pages[l], doc.flat(l)[0].view(doc.k_pages[l].shape))


def test_put_pages_writes_units_in_the_documents_format(gemma):
    """What a prefill resumed from a checkpoint puts back: QuantKVPages byte for byte, float units
    quantised as prefill would (never cast into the int8 values)."""
    doc = gemma.prefill(token_ids(50, 4), progress=False)
    units = [doc.page_tensor(i) for i in range(doc.num_pages)]
    for given in (units, [u.dequantize() for u in units]):
        fresh = DocKV.allocate(doc.layout, 16, doc.num_tokens, torch.float32, "cpu", kv_dtype=torch.int8)
        fresh.put_pages(0, given)
        for l in doc.k_pages:
            torch.testing.assert_close(fresh.flat(l)[0], doc.flat(l)[0], atol=1e-6, rtol=0.01)
            if given is units:
                assert torch.equal(fresh.k_pages[l], doc.k_pages[l]) and torch.equal(fresh.k_scales[l], doc.k_scales[l])


@pytest.mark.parametrize("mode", ["eager", "static"])
def test_query_paths_read_quantised_pages_as_their_dequantised_values(gemma, mode):
    """Every query path over the quantised pages equals the same path over a float copy of them
    (the dequantised values), up to float32 rounding: the packed eager rows (row by row and in
    decode groups) and, in static mode, the query slots and the batched union rows."""
    doc = gemma.prefill(token_ids(90, 3), progress=False)
    ref = float_copy(doc)
    gemma.query_mode = mode
    try:
        for pages in (None, (0, 2, 5)):
            got, want = [], []
            for d, out in ((doc, got), (ref, want)):
                tails = [gemma.new_tail(d) for _ in range(3)]
                rows = [Row(d, t, token_ids(5 + i, 10 + i), pages) for i, t in enumerate(tails)]
                out.append(torch.stack(run_rows(gemma, rows)))
                for _ in range(3):  # decode steps: one token per row
                    rows = [Row(d, t, [7 + i], pages) for i, t in enumerate(tails)]
                    out.append(torch.stack(run_rows(gemma, rows)))
                for t in tails:
                    release(t)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, atol=2e-4, rtol=2e-4)
    finally:
        gemma.query_mode = "eager"


@pytest.mark.model
def test_int8_engine_on_the_real_gemma_answers_as_the_float_one():
    """The CPU engine with kv_dtype int8 on the real Gemma 3 270M: a ~1.5K-token document held as
    int8 pages (a quarter of float32, plus scales), a question over every page and one over a
    plan of pages. Check: the first 12 greedy tokens equal the float32 engine's, and
    the prompt's last-token log-probabilities differ by at most 0.05 nats (max over the vocab's
    top 20 of the float run)."""
    from agentctx.serving.engine.local import LocalEngine
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.types import GenerateRequest

    loaded = load_model(None, device="cpu")
    text = " ".join(f"Clause {i}: the supplier shall deliver {i * 7 % 13} crates of item {i} to depot "
                    f"{i % 5} on day {3 * i}." for i in range(80))
    question = "Which depot receives item 41, and on which day?"
    runs = {}
    for kv in ("auto", "int8"):
        eng = LocalEngine(loaded, page_size=256, prefill_chunk_tokens=512, query_mode="eager", kv_dtype=kv)
        try:
            doc = eng.tokenize_document(text)
            assert 1000 < len(doc.token_ids) < 2500
            eng.prefill("c", doc, progress=False)
            kvd = eng.kv.get("c")
            # Page bytes (values and scales); kv_bytes also counts the float sliding windows.
            paged = sum(t.numel() * t.element_size() for t in (*kvd.k_pages.values(), *kvd.v_pages.values(),
                                                               *kvd.k_scales.values(), *kvd.v_scales.values()))
            runs[kv] = dict(bytes=paged, quantized=kvd.quantized, tokens={}, logp={})
            for name, pages in (("dense", None), ("plan", (0, 2, 4, kvd.num_pages - 1))):
                r = eng.generate(GenerateRequest("c", question, max_new_tokens=12, pages=pages, ignore_eos=True))
                runs[kv]["tokens"][name] = r.token_ids
                ids = eng.tokenizer(question, add_special_tokens=False)["input_ids"]
                with torch.inference_mode():
                    logits = eng.runner.extend(kvd, eng.runner.new_tail(kvd), ids, pages)
                runs[kv]["logp"][name] = torch.log_softmax(logits.float(), -1)
        finally:
            eng.close()
    f, q = runs["auto"], runs["int8"]
    assert q["quantized"] and not f["quantized"] and q["bytes"] < 0.3 * f["bytes"]
    for name in ("dense", "plan"):
        assert q["tokens"][name] == f["tokens"][name], (name, q["tokens"][name], f["tokens"][name])
        top = f["logp"][name].topk(20).indices
        diff = (q["logp"][name][top] - f["logp"][name][top]).abs().max().item()
        assert diff < 0.2, (name, diff)
