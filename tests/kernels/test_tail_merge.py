"""kernels.tail_merge: the merged result is dense attention over [pages, causal tail]; bad input is refused.

The Triton kernel is held to this reference by the interpreter grid
(test_triton_interpret.py) and on a GPU (test_tail_merge_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from agentctx.kernels import dense_attention_reference
from agentctx.kernels.positional import full_attention_lse
from agentctx.kernels.tail_merge import attend_tail_merged


@pytest.mark.parametrize("softcap", [None, 15.0])
@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2)])
def test_merged_equals_dense_over_pages_and_causal_tail(hq, hkv, softcap):
    g = torch.Generator().manual_seed(0)
    d, n_doc, c, base, tq = 32, 50, 40, 6, 5
    q = torch.randn(tq, hq, d, generator=g, dtype=torch.float64)
    doc_k, doc_v = torch.randn(n_doc, hkv, d, generator=g, dtype=torch.float64), torch.randn(n_doc, hkv, d,
                                                                                              generator=g,
                                                                                              dtype=torch.float64)
    tail_k, tail_v = torch.randn(c, hkv, d, generator=g, dtype=torch.float64), torch.randn(c, hkv, d, generator=g,
                                                                                           dtype=torch.float64)
    # Slots past the last token hold stale values of an earlier query: they must not count.
    # (Finite: the torch path multiplies them by exact zeros, the kernel does not load them.)
    tail_k[base + tq:] = 1e4
    tail_v[base + tq:] = -1e4
    scale = d**-0.5
    o_pages, l_pages = full_attention_lse(q, doc_k, doc_v, scale, softcap)
    slots = torch.arange(base, base + tq)
    got = attend_tail_merged(q, tail_k, tail_v, slots, o_pages, l_pages, scale, softcap)
    # Dense: query token i sees every document key and tail slots 0..base+i.
    keys = torch.cat([doc_k, tail_k[: base + tq]])
    vals = torch.cat([doc_v, tail_v[: base + tq]])
    want = dense_attention_reference(q.unsqueeze(0), keys.unsqueeze(0), vals.unsqueeze(0), scale,
                                     causal_offset=n_doc + base, softcap=softcap)[0][0]
    # The torch path computes in fp32 whatever the input dtype: fp32 rounding vs a float64 reference.
    torch.testing.assert_close(got, want.to(got.dtype), atol=2e-6, rtol=1e-4)


def _inputs(tq=3, hq=4, hkv=1, d=16, c=8):
    return dict(q=torch.randn(tq, hq, d), tail_k=torch.randn(c, hkv, d), tail_v=torch.randn(c, hkv, d),
                q_slots=torch.arange(tq), o_pages=torch.randn(tq, hq, d), lse_pages=torch.randn(tq, hq))


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(q=torch.randn(3, 4)), "q must be"),
        (dict(tail_v=torch.randn(9, 1, 16)), "q must be"),
        (dict(tail_k=torch.randn(8, 3, 16), tail_v=torch.randn(8, 3, 16)), "do not fit"),
        (dict(q_slots=torch.arange(3).float()), "q_slots"),
        (dict(q_slots=torch.arange(4)), "q_slots"),
        (dict(lse_pages=torch.randn(3, 2)), "page partial"),
        (dict(tail_k=torch.randn(8, 1, 16).double(), tail_v=torch.randn(8, 1, 16).double()), "dtype"),
    ],
)
def test_bad_input_is_refused(change, match):
    kw = _inputs() | change
    with pytest.raises(ValueError, match=match):
        attend_tail_merged(scale=0.25, **kw)


def test_bad_impl_is_refused():
    with pytest.raises(ValueError, match="impl"):
        attend_tail_merged(scale=0.25, impl="cuda", **_inputs())


@pytest.mark.parametrize("wt,window", [(16, 16), (5, 16), (16, 4)])
def test_window_equals_positional_sliding_attention(wt, window):
    """attend_window's band over [doc window | tail] is the eager path's positional rule."""
    from agentctx.kernels.positional import masked_attention_lse
    from agentctx.kernels.tail_merge import attend_window

    g = torch.Generator().manual_seed(wt + window)
    n_doc, c, base, tq, hq, hkv, d = 40, 24, 3, 6, 4, 2, 16
    k = torch.randn(wt + c, hkv, d, generator=g)
    v = torch.randn(wt + c, hkv, d, generator=g)
    q = torch.randn(tq, hq, d, generator=g)
    slots = torch.arange(base, base + tq)
    got = attend_window(q, k, v, slots, wt, window, 0.25)
    # Positions: buffer entry b holds position n_doc - wt + b; the query token in slot s is at n_doc + s.
    n = wt + base + tq
    kpos = torch.arange(n_doc - wt, n_doc - wt + n)
    want, _ = masked_attention_lse(q, k[:n], v[:n], slots + n_doc, kpos, 0.25, window=window)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-4)


@pytest.mark.parametrize("offset,window,match", [(-1, 4, "offset"), (99, 4, "offset"), (0, 0, "window")])
def test_window_bad_input_is_refused(offset, window, match):
    from agentctx.kernels.tail_merge import attend_window

    kw = _inputs()
    with pytest.raises(ValueError, match=match):
        attend_window(kw["q"], kw["tail_k"], kw["tail_v"], kw["q_slots"], offset, window, 0.25)


def test_first_call_check_falls_back_to_torch_on_a_wrong_or_failing_kernel(caplog):
    from agentctx.kernels import tail_merge as tm

    want = torch.ones(3)
    calls = []

    def wrong():
        calls.append("kernel")
        return torch.full((3,), 2.0)

    def broken():
        raise RuntimeError("no compile")

    with caplog.at_level("WARNING"):
        for sig, kernel in ((("test-wrong",), wrong), (("test-broken",), broken)):
            tm._checked.pop(sig, None)
            assert torch.equal(tm._kernel_or_reference(sig, kernel, lambda: want, torch.float32), want)
            assert tm._checked[sig] is False
            # Later calls go straight to the torch path.
            assert torch.equal(tm._kernel_or_reference(sig, kernel, lambda: want, torch.float32), want)
    assert calls == ["kernel"]
    assert "failed its first-call check" in caplog.text and "no compile" in caplog.text


def test_first_call_results_report_kernel_or_fallback():
    from agentctx.kernels import tail_merge as tm

    good = ("window", "cuda:0", torch.bfloat16, 4, 1, 256, False, 16, 8)
    bad = ("tail_merged", "cuda:0", torch.float16, 8, 2, 128, False, 64, 1)
    saved = dict(tm._checked)
    try:
        tm._checked.update({good: True, bad: False, ("test-odd",): True})
        got = tm.first_call_results()
        assert got["window bfloat16 4/1x256 m16 s8"] == "triton"
        assert got["tail_merged float16 8/2x128 m64"] == "torch fallback"
        assert not any("test-odd" in k for k in got)
    finally:
        tm._checked.clear()
        tm._checked.update(saved)


def test_first_call_check_keeps_a_correct_kernel():
    from agentctx.kernels import tail_merge as tm

    sig = ("test-good",)
    tm._checked.pop(sig, None)
    close = torch.tensor([1.0, 2.0, 3.0 + 1e-6])
    assert torch.equal(tm._kernel_or_reference(sig, lambda: close, lambda: torch.tensor([1.0, 2.0, 3.0]),
                                               torch.float32), torch.tensor([1.0, 2.0, 3.0]))
    assert tm._checked[sig] is True
    assert tm._kernel_or_reference(sig, lambda: close, lambda: 1 / 0, torch.float32) is close


@pytest.mark.parametrize(
    "rows, hkv, window, block_n, n_sm, want",
    [
        (4, 1, 512, 32, 132, 8),  # Gemma 3 decode: one program would stream the whole band
        (96, 1, 512, 32, 132, 8),  # a 24-token prompt: 6 tiles, still far from filling the GPU
        (65536, 1, 512, 32, 132, 1),  # a 16K prefill chunk: its 4,096 tiles fill the GPU alone
        (4, 1, 32, 32, 132, 1),  # a short band: at least 2 steps per program
        (16, 8, 4096, 64, 16, 4),  # 8 programs already: 2 per SM needs 4 splits
    ],
)
def test_window_split_rule(rows, hkv, window, block_n, n_sm, want):
    from agentctx.kernels.tail_tiles import window_splits

    assert window_splits(rows, hkv, window, block_n, n_sm) == want
