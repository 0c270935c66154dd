"""Cases for the union kernel over quantised pages (kernels/triton_union.py with kernels/kv_quant.py
pools): the CPU interpreter runner (test_union_quant.py) and the GPU test (test_union_quant_gpu.py).

Each case draws the float pool and plans of :mod:`._union_cases` (ragged last page, NaN past its
valid tokens), quantises K and V with ``quantize_pages`` and holds the kernel to two bounds:

* **same pages** (tight): the kernel against ``attend_union_reference`` over the *same* quantised
  pools (dequantised to float32 there). fp32 queries: 1e-4 relative; bf16 queries: 1e-2, the
  float union cases' bf16 tolerance (the kernel rounds p, and a channel scale folded into q, to
  bf16 for the tensor cores; the interpreter upcasts and is tighter).
* **quantised vs float pages** (loose): the kernel against float64 attention over the unquantised
  pages. Gaussian K/V: fp8 e4m3 keeps ~3 significant bits (2.6 % RMS per value, kernels/kv_quant.py),
  int8 ~0.7 %; the output bounds, 0.06 for fp8 and 0.02 for int8, are about twice what the
  interpreter gave (fp8 0.033-0.035, int8 0.008-0.011).
Importing this does not import triton.
"""

from __future__ import annotations

import torch

from ._union_cases import _exact, _inputs

__all__ = ["union_quant_cases", "run_union_quant_case", "QUANT_VS_FLOAT"]

_SAME_TOL = {"fp32": 1e-4, "bf16": 1e-2}
QUANT_VS_FLOAT = {"fp8": 0.06, "int8": 0.02}


def union_quant_cases(small: bool = True) -> dict[str, dict]:
    # Llama 3 8B's heads (Hq 32, Hkv 8, D 128) and Gemma 3's (Hq 4, Hkv 1, D 256), few small pages;
    # gran None: kv_quant's defaults (fp8 K/V token_head; int8 K channel, V token_head).
    base = dict(S=7, P=16, pick=0.5)
    llama = dict(R=3, Hq=32, Hkv=8, D=128, **base)
    gemma = dict(R=5, Hq=4, Hkv=1, D=256, **base)
    cases = {
        "llama-fp8-bf16": dict(llama, qdtype="fp8", dtype="bf16", seed=21),
        "llama-int8-bf16": dict(llama, qdtype="int8", dtype="bf16", seed=22),
        "gemma-fp8-softcap": dict(gemma, qdtype="fp8", dtype="bf16", softcap=20.0, seed=23),
        "gemma-int8-softcap": dict(gemma, qdtype="int8", dtype="bf16", softcap=20.0, seed=24),
        "gemma-int8-fp32": dict(gemma, qdtype="int8", dtype="fp32", seed=25),
        "gemma-fp8-fp32": dict(gemma, qdtype="fp8", dtype="fp32", seed=26),
        # The other granularities through the same code path (scale strides 0 on broadcast axes).
        "page-head-and-channel": dict(R=2, Hq=8, Hkv=2, D=64, S=6, P=16, pick=0.6, qdtype="int8", dtype="fp32",
                                      gran=("page_head", "channel"), empty_row=1, pad=3, seed=27),
        "fp8-channel-page-head": dict(R=2, Hq=8, Hkv=2, D=64, S=6, P=16, pick=0.6, qdtype="fp8", dtype="bf16",
                                      gran=("channel", "page_head"), seed=28),
    }
    if not small:
        cases["llama-fp8-256-pages"] = dict(R=16, Hq=32, Hkv=8, D=128, S=256, P=256, pick=0.12, qdtype="fp8",
                                            dtype="bf16", seed=29)
        cases["gemma-int8-1k-pages"] = dict(R=16, Hq=4, Hkv=1, D=256, S=1024, P=256, pick=0.12, qdtype="int8",
                                            dtype="bf16", softcap=50.0, seed=30)
    return cases


def quantized_inputs(spec: dict, device: str):
    """(args with K/V as QuantPages, float args, plans, scale, softcap)."""
    from agentctx.kernels.kv_quant import quantize_pages

    args, plans, scale, cap = _inputs(spec, device)
    q, k, v, union, n, bits, lens = args
    gk, gv = spec.get("gran", (None, None))
    kq = quantize_pages(k, spec["qdtype"], gk, part="k", slot_lens=lens)
    vq = quantize_pages(v, spec["qdtype"], gv, part="v", slot_lens=lens)
    return (q, kq, vq, union, n, bits, lens), args, plans, scale, cap


def run_union_quant_case(spec: dict, device: str) -> None:
    from agentctx.kernels.triton_union import triton_attend_union
    from agentctx.kernels.union_attend import attend_union, attend_union_reference

    qargs, fargs, plans, scale, cap = quantized_inputs(spec, device)
    attend_union(*qargs, scale, cap, impl="torch")  # the public call's validation
    want_o, want_l = attend_union_reference(*qargs, scale, cap)
    got_o, got_l = triton_attend_union(*qargs, scale, cap)
    assert got_o.shape == want_o.shape and got_o.dtype == want_o.dtype and got_l.shape == want_l.shape
    live = [i for i, pl in enumerate(plans) if pl]
    for i in (i for i, pl in enumerate(plans) if not pl):
        assert torch.all(got_o[i] == 0) and torch.all(torch.isneginf(got_l[i])), "a row with no page"
    go, wo = got_o[live].float(), want_o[live].float()
    assert torch.isfinite(go).all(), "non-finite output"
    same = ((go - wo).norm() / wo.norm()).item()
    assert same <= _SAME_TOL[spec["dtype"]], f"kernel vs reference on the same pages: rel err {same:.3g}"
    lse_err = (got_l[live] - want_l[live]).abs().max().item()
    assert lse_err <= 2e-3 * max(1.0, want_l[live].abs().max().item()), f"lse err {lse_err:.3g}"
    exact = _exact(tuple(x.float() if x.is_floating_point() else x for x in fargs), plans, scale, cap)[live]
    vs_float = ((go.double().cpu() - exact).norm() / exact.norm()).item()
    assert vs_float <= QUANT_VS_FLOAT[spec["qdtype"]], f"quantised vs float pages: rel err {vs_float:.3g}"
