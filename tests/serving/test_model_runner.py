"""Exactness of the paged forward against transformers' own forward (tiny random models)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.model_loader import ModelLoadError, load_model
from agentctx.serving.runner.model_runner import ContextTooLongError, EmptyInputError, ModelRunner
from tests.factories import TINY_FAMILIES, greedy_tokens, make_tiny_checkpoint, token_ids

# fp32 on CPU: our blockwise attention and transformers' SDPA differ only by rounding.
FP32_ATOL = 1e-4


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def tiny(request, tmp_path_factory):
    path = make_tiny_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    loaded = load_model(path, device="cpu")
    return ModelRunner(loaded, page_size=16, prefill_chunk_tokens=32, max_context_tokens=4096)


@pytest.mark.parametrize("doc_len", [16, 100, 161])
def test_all_pages_selected_matches_transformers(tiny, doc_len):
    doc_ids, q_ids = token_ids(doc_len, 1), token_ids(7, 2)
    ref = tiny.reference_logits(doc_ids + q_ids)
    doc = tiny.prefill(doc_ids, progress=False)
    torch.testing.assert_close(doc.last_logits, ref[doc_len - 1], atol=FP32_ATOL, rtol=0)
    tail = tiny.new_tail(doc)
    got = tiny.extend(doc, tail, q_ids, pages=None, all_logits=True)
    torch.testing.assert_close(got, ref[doc_len:], atol=FP32_ATOL, rtol=0)
    # decoding one more token through the tail stays exact
    nxt = int(got[-1].argmax())
    ref2 = tiny.reference_logits(doc_ids + q_ids + [nxt])
    torch.testing.assert_close(tiny.extend(doc, tail, [nxt]), ref2[-1], atol=FP32_ATOL, rtol=0)


def test_cold_vs_warm_greedy_tokens_identical(tiny):
    doc_ids, q_ids = token_ids(90, 3), token_ids(5, 4)
    doc = tiny.prefill(doc_ids, progress=False)
    warm = greedy_tokens(tiny, doc, q_ids, pages=None, max_new_tokens=8, stop_ids=set())
    # cold: transformers greedy decoding over the full sequence, no cache
    seq = doc_ids + q_ids
    cold = []
    for _ in range(8):
        nxt = int(tiny.reference_logits(seq)[-1].argmax())
        cold.append(nxt)
        seq.append(nxt)
    assert warm == cold


def test_page_selection_changes_attention(tiny):
    doc_ids, q_ids = token_ids(160, 5), token_ids(4, 6)
    doc = tiny.prefill(doc_ids, progress=False)
    full = tiny.extend(doc, tiny.new_tail(doc), q_ids, pages=None)
    sparse = tiny.extend(doc, tiny.new_tail(doc), q_ids, pages=[0, 9])
    same = tiny.extend(doc, tiny.new_tail(doc), q_ids, pages=list(range(doc.num_pages)))
    torch.testing.assert_close(same, full)
    assert not torch.allclose(sparse, full, atol=1e-4)


def test_bad_inputs(tiny, tmp_path):
    with pytest.raises(EmptyInputError):
        tiny.prefill([], progress=False)
    with pytest.raises(ContextTooLongError, match="4096"):
        tiny.prefill([5] * 4097, progress=False)
    doc = tiny.prefill(token_ids(20, 7), progress=False)
    with pytest.raises(EmptyInputError):
        tiny.extend(doc, tiny.new_tail(doc), [])
    with pytest.raises(ValueError, match="out of range"):
        tiny.extend(doc, tiny.new_tail(doc), [5], pages=[7])


def test_unsupported_model_dirs(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ModelLoadError, match="not supported"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_model(tmp_path)


@pytest.mark.parametrize("sliding", ["kernel", "square"])
def test_sliding_prefill_paths_agree(sliding, tmp_path):
    """Each way a prefill chunk's sliding layers can attend (SLIDING_PREFILL) gives the banded
    path's logits and keeps the same last-window KV; on CPU "kernel" runs its torch reference,
    which takes the same slot layout the Triton kernel does (previous window, then the chunk)."""
    path = make_tiny_checkpoint("gemma3_text", tmp_path)
    runner = ModelRunner(load_model(path, device="cpu"), page_size=16, prefill_chunk_tokens=32)
    ids = token_ids(150, 8)  # 5 chunks, the last one short; window 16 < chunk
    runner.sliding_prefill = "banded"
    want = runner.prefill(ids, progress=False)
    runner.sliding_prefill = sliding
    got = runner.prefill(ids, progress=False)
    torch.testing.assert_close(got.last_logits, want.last_logits, atol=FP32_ATOL, rtol=0)
    assert got.window_k.keys() == want.window_k.keys() and got.window_k
    for layer in want.window_k:
        torch.testing.assert_close(got.window_k[layer], want.window_k[layer], atol=FP32_ATOL, rtol=0)
    torch.testing.assert_close(got.last_logits, runner.reference_logits(ids)[-1], atol=FP32_ATOL, rtol=0)


def test_sliding_prefill_refuses_unknown_path(tmp_path):
    runner = ModelRunner(load_model(make_tiny_checkpoint("gemma3_text", tmp_path), device="cpu"), page_size=16,
                         prefill_chunk_tokens=32)
    runner.sliding_prefill = "fast"
    with pytest.raises(ValueError, match="sliding_prefill must be one of"):
        runner.prefill(token_ids(20, 9), progress=False)
