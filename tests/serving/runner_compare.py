"""Shared check of the GPU fusion tests: two runners over one model answer alike in graph mode."""

from __future__ import annotations

import torch


def assert_runners_agree(fused, plain, dtype: torch.dtype, argmax_fp32: bool = True) -> None:
    """A 280-token document, a 20-token query over a few pages and over all of them: logits
    within rounding of each other (fp32 1e-4, bf16 3e-2 relative), and in fp32 the same argmax."""
    ids = torch.randint(4, 259, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    doc_f, doc_p = fused.prefill(ids[:280], progress=False), plain.prefill(ids[:280], progress=False)
    for pages in ([0, 4, 17], None):
        lf = fused.extend(doc_f, fused.new_tail(doc_f), ids[280:], pages)
        lp = plain.extend(doc_p, plain.new_tail(doc_p), ids[280:], pages)
        rel = ((lf - lp).norm() / lp.norm()).item()
        assert rel < tol, (pages, rel)
        if argmax_fp32 and dtype == torch.float32:
            assert int(lf.argmax()) == int(lp.argmax())
