"""The real Gemma 3 270M: paged forward == transformers forward, beyond the 512-token window."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.model_runner import ModelRunner

pytestmark = pytest.mark.model

# fp32 on CPU. Logits of this model reach |x| ~ 30; allow 1e-3 of that scale.
REL_TOL = 1e-3


@pytest.fixture(scope="module")
def runner():
    return ModelRunner(load_model(None, device="cpu"), page_size=256, prefill_chunk_tokens=512)


def test_paged_logits_match_transformers_across_window(runner):
    text = " ".join(f"Clause {i}: the supplier shall deliver item {i * 7 % 13} on day {i}." for i in range(90))
    ids = runner.tokenizer(text)["input_ids"]
    assert len(ids) > 1100  # longer than the sliding window (512) and several pages
    doc_ids, q_ids = ids[:-9], ids[-9:]
    ref = runner.reference_logits(ids)
    doc = runner.prefill(doc_ids, progress=False)
    assert doc.window_k[0].shape[0] == 512  # sliding layers keep only their window
    got = runner.extend(doc, runner.new_tail(doc), q_ids, all_logits=True)
    scale = ref.abs().max()
    assert (got - ref[len(doc_ids):]).abs().max() / scale < REL_TOL
    assert (doc.last_logits - ref[len(doc_ids) - 1]).abs().max() / scale < REL_TOL
    assert torch.equal(got.argmax(-1), ref[len(doc_ids):].argmax(-1))
