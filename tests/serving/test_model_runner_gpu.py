"""Paged forward on CUDA vs transformers' own forward (tiny random models of the real families)."""

from __future__ import annotations

import pytest
import torch

from serving.model_loader import load_model
from serving.model_runner import ModelRunner
from tests.factories import TINY_FAMILIES, make_tiny_checkpoint

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_matches_transformers_on_cuda(family, dtype, tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = False
    path = make_tiny_checkpoint(family, tmp_path)
    runner = ModelRunner(load_model(path, dtype=dtype, device="cuda"), page_size=16, prefill_chunk_tokens=64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 259, (300,), generator=g).tolist()
    doc_ids, q_ids = ids[:-12], ids[-12:]
    ref = runner.reference_logits(ids)
    doc = runner.prefill(doc_ids, progress=False)
    got = runner.extend(doc, runner.new_tail(doc), q_ids, all_logits=True)
    want = ref[len(doc_ids):]
    rel = ((got - want).norm() / want.norm()).item()
    # fp32: rounding only. bf16: our kernels accumulate in fp32, transformers' SDPA in bf16.
    assert rel < (1e-4 if dtype == torch.float32 else 3e-2), rel
    if dtype == torch.float32:
        assert torch.equal(got.argmax(-1), want.argmax(-1))
