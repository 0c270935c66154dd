"""Cases for the tail-attention-and-merge kernel (GPU test and CPU interpreter runner).

Importing this module does not import triton.
"""

from __future__ import annotations

import itertools

import torch

__all__ = ["tail_cases", "run_tail_case"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Relative error ||out - ref|| / ||ref|| vs the fp32 torch path. Both compute in fp32 (the
# kernel keeps P in fp32 for the PV product); half precision differs by the final rounding
# of the output to the input dtype (bf16: 2^-9 relative, fp16: 2^-12).
_TOL = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 5e-3}


def tail_cases(small: bool = True) -> dict[str, dict]:
    cases = {}
    heads = [(4, 1, 256), (8, 2, 64), (32, 8, 128)]
    for i, (dt, (hq, hkv, d), tq) in enumerate(itertools.product(_DT, heads, (1, 7, 40))):
        if small and i % 3:  # interpreter: 9 of the 27 combinations, each dtype/heads/Tq pair once
            continue
        cases[f"{dt}-hq{hq}-hkv{hkv}-d{d}-tq{tq}"] = dict(dtype=dt, Hq=hq, Hkv=hkv, D=d, Tq=tq, C=160, base=37,
                                                          seed=i)
    cases["softcap-bf16"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=3, C=64, base=10, softcap=20.0, seed=40)
    cases["first-token-no-pages"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=5, C=64, base=0, empty_pages=True,
                                         seed=41)
    cases["slots-to-the-end"] = dict(dtype="fp32", Hq=4, Hkv=1, D=80, Tq=16, C=96, base=80, seed=42)
    cases["pages-dominate"] = dict(dtype="bf16", Hq=8, Hkv=2, D=128, Tq=2, C=64, base=5, page_lse=30.0, seed=43)
    cases["pad-rows-past-real"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=8, C=300, base=250, seed=44)
    # Sliding-window layers: [document window (Wt entries) | tail], band of W entries per token.
    for i, (dt, tq) in enumerate(itertools.product(("fp32", "bf16"), (1, 7, 40))):
        cases[f"window-{dt}-tq{tq}"] = dict(dtype=dt, Hq=4, Hkv=1, D=256, Tq=tq, C=32 + 96, base=3, window=32,
                                            offset=32, seed=50 + i)
    cases["window-short-doc"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=5, C=5 + 64, base=0, window=32, offset=5,
                                     seed=60)
    cases["window-wider-than-buffer"] = dict(dtype="bf16", Hq=8, Hkv=2, D=128, Tq=3, C=40, base=10, window=512,
                                             offset=20, seed=61)
    cases["window-softcap"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=9, C=16 + 64, base=40, window=16,
                                   offset=16, softcap=20.0, seed=62)
    # A prefill chunk: [previous window | chunk], many row tiles, each reading only its band.
    cases["window-prefill-chunk"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=160, C=32 + 160, base=0, window=32,
                                         offset=32, seed=64)
    # 1,280 rows in 80 row tiles, each reading only its band.
    cases["window-prefill-first-chunk"] = dict(dtype="fp32", Hq=16, Hkv=2, D=64, Tq=160, C=160, base=0, window=40,
                                               offset=0, seed=65)
    if not small:  # the shape the shared prefill runs on a GPU (Gemma 3: W 512, 4096-token chunks)
        cases["window-prefill-4k"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=4096, C=512 + 4096, base=0,
                                          window=512, offset=512, seed=66)
    # Split-K along the band (decode: one KV head, one row tile). Forced split counts leave some
    # programs with an empty run (their partial must weigh nothing); "auto" takes the launch rule.
    cases["window-split-empty-runs"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=1, C=32 + 96, base=3, window=32,
                                            offset=32, splits=4, seed=70)
    cases["window-split-uneven"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=7, C=200 + 7, base=0, window=200,
                                        offset=200, splits=3, seed=71)
    cases["window-split-tiles-fp16"] = dict(dtype="fp16", Hq=4, Hkv=1, D=128, Tq=40, C=96 + 64, base=10,
                                            window=96, offset=96, splits=5, softcap=20.0, seed=72)
    cases["window-split-auto-decode"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=1, C=512 + 16, base=0,
                                             window=512, offset=512, seed=73)
    cases["window-one"] = dict(dtype="fp32", Hq=4, Hkv=2, D=64, Tq=4, C=48, base=7, window=1, offset=8, seed=63)
    # Batched decode rows (q_base): R rows' buffers back to back, one token per row at its own
    # length, each seeing only its own row; rows of length 0 see their new token alone.
    for i, (dt, (hq, hkv, d)) in enumerate(itertools.product(("fp32", "bf16"), ((4, 1, 256), (32, 8, 128)))):
        cases[f"rows-{dt}-hq{hq}-hkv{hkv}"] = dict(dtype=dt, Hq=hq, Hkv=hkv, D=d, Tq=6, C=40, rows=True,
                                                  lens=[0, 5, 39, 12, 1, 20], base=0, seed=80 + i)
        cases[f"rows-window-{dt}-hq{hq}-hkv{hkv}"] = dict(
            dtype=dt, Hq=hq, Hkv=hkv, D=d, Tq=5, C=24 + 40, rows=True, lens=[0, 3, 39, 17, 8], base=0,
            window=32, offset=24, seed=90 + i)
    # q as the decode step hands it over: a (T, H, D) view of a heads-first (1, H, T, D) tensor.
    cases["rows-window-split"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=16, C=512 + 64, rows=True,
                                      lens=[i * 4 for i in range(16)], base=0, window=512, offset=512, seed=99,
                                      q_heads_first=True)
    cases["rows-heads-first-q"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=5, C=40, rows=True,
                                       lens=[0, 3, 39, 17, 8], base=0, seed=98, q_heads_first=True)
    return cases


def run_tail_case(spec: dict, device: str) -> None:
    from agentctx.kernels.tail_merge import (
        attend_tail_merged,
        attend_tail_merged_reference,
        attend_window,
        attend_window_reference,
    )

    g = torch.Generator().manual_seed(spec["seed"])
    dt = _DT[spec["dtype"]]
    tq, hq, hkv, d, c = spec["Tq"], spec["Hq"], spec["Hkv"], spec["D"], spec["C"]

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dt)

    q_base = None
    if spec.get("rows"):  # Tq rows of C entries each, flattened; token i at its row's length
        c = tq * spec["C"]
        q_base = torch.arange(tq, device=device) * spec["C"]
        slots = q_base + torch.tensor(spec["lens"], device=device)
        # Window buffers are [document window | tail] per row: entry = offset + slot, so the
        # token sees its row's document window too (the band stops at its row's start).
    else:
        slots = torch.arange(spec["base"], spec["base"] + tq, device=device)
    q, tk, tv = rnd(tq, hq, d), rnd(c, hkv, d), rnd(c, hkv, d)
    if spec.get("q_heads_first"):
        q = rnd(hq, tq, d).transpose(0, 1)
    o_pages = rnd(tq, hq, d)
    lse = (torch.randn(tq, hq, generator=g) * 2 + spec.get("page_lse", 0.0)).to(device)
    if spec.get("empty_pages"):
        lse[: tq // 2 + 1] = float("-inf")
        o_pages[: tq // 2 + 1] = 0
    scale = d**-0.5
    cap = spec.get("softcap")
    # The raw kernels: attend_* would answer a signature's first call from the torch path.
    from agentctx.kernels.triton_tail import triton_tail_merged, triton_window

    if "window" in spec:
        args = (q, tk, tv, slots, spec["offset"], spec["window"], scale, cap)
        attend_window(*args, impl="torch", q_base=q_base)  # input validation, as the public call does
        want = attend_window_reference(*args, q_base=q_base)
        got = triton_window(*args, num_splits=spec.get("splits"), q_base=q_base)
    else:
        args = (q, tk, tv, slots, o_pages, lse, scale, cap)
        attend_tail_merged(*args, impl="torch", q_base=q_base)
        want, got = attend_tail_merged_reference(*args, q_base=q_base), triton_tail_merged(*args, q_base=q_base)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.is_contiguous(), got.stride()  # whatever q's layout (a permuted one cost a copy per layer)
    assert torch.isfinite(got.float()).all(), "non-finite output"
    rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert rel <= _TOL[spec["dtype"]], f"rel err {rel:.3g}"
    # Triton 3.6's CPU interpreter truncates fp32 -> bf16 where the GPU rounds to nearest
    # (checked: every element matches truncation), so bf16 accuracy is judged on the GPU only.
    if dt == torch.float16 or (dt == torch.bfloat16 and device != "cpu"):
        # In half precision the kernel must be at least as close as the torch path to the
        # exact answer (the same function of the rounded inputs, in float64).
        exact = _exact(spec, q, tk, tv, slots, o_pages, lse, scale, cap, q_base)

        def err(x):
            return ((x.double().cpu() - exact).norm() / exact.norm()).item()

        # Compiled, the kernel rounds the probabilities to the buffers' dtype for the tensor-core P @ V
        # (kernels/triton_tail.py LOWP_PV, as the page and union kernels do; seen up to 1.3x here); the
        # interpreter keeps them in fp32.
        slack = 2.0 if device != "cpu" else 1.25
        assert err(got) <= slack * err(want) + 1e-6, f"kernel err {err(got):.3g} vs torch path {err(want):.3g}"


def _exact(spec, q, k, v, slots, o_pages, lse, scale, cap, q_base=None) -> torch.Tensor:
    """Float64 attention over the visible slots (merged with the page partial for the tail)."""
    q, k, v, o_pages, lse = (x.double().cpu() for x in (q, k, v, o_pages, lse))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,chd->thc", q, k) * scale
    if cap:
        scores = cap * torch.tanh(scores / cap)
    idx = torch.arange(k.shape[0]).view(1, 1, -1)
    hi = (slots.cpu() + spec.get("offset", 0)).view(-1, 1, 1)
    visible = idx <= hi
    if "window" in spec:
        visible &= idx > hi - spec["window"]
    if q_base is not None:
        visible &= idx >= q_base.cpu().view(-1, 1, 1)
    scores = scores.masked_fill(~visible, float("-inf"))
    lse_own = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("thc,chd->thd", torch.softmax(scores, dim=-1), v)
    if "window" in spec:
        return out
    m = torch.maximum(lse, lse_own)
    w_page, w_own = torch.exp(lse - m).unsqueeze(-1), torch.exp(lse_own - m).unsqueeze(-1)
    return (o_pages * w_page + out * w_own) / (w_page + w_own)
