"""Shared checks of the GPU tests: two runners over one model answer alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from agentctx.serving.runner.batch_forward import Row, run_rows


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


def assert_rows_agree(eager, graph, row_for: Callable[[object, int], Row], schedule: Sequence[Sequence[int]],
                      toks: list[list[int]], dtype: torch.dtype) -> None:
    """Batched decode steps of the same rows on two runners: at each step of ``schedule`` (the rows
    in it) every row's logits within rounding of the eager runner's (fp32 1e-4, bf16 3e-2 relative)
    and in fp32 the same argmax; each row then feeds the eager argmax to both (``toks[i]``, which
    ``row_for(runner, i)`` reads)."""
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for which in schedule:
        want = run_rows(eager, [row_for(eager, i) for i in which])
        got = run_rows(graph, [row_for(graph, i) for i in which])
        for i, w, x in zip(which, want, got):
            rel = ((x - w).norm() / w.norm()).item()
            assert rel < tol, (i, rel)
            if dtype == torch.float32:
                assert int(x.argmax()) == int(w.argmax())
            toks[i] = [int(w.argmax())]
