"""Cases for the decode step's small kernels (kernels/act_mul.py, kernels/slot_write.py,
kernels/add_norm.py), shared by the GPU test and the CPU interpreter runner. Importing this module
does not import triton."""

from __future__ import annotations

import torch

__all__ = ["act_mul_cases", "run_act_mul_case", "slot_write_cases", "run_slot_write_case", "add_norm_cases",
           "run_add_norm_case", "ACT_TOL"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Max abs error vs PyTorch's act(gate) * up, relative to the output's max magnitude: the kernel's
# tanh / exp differ from PyTorch's in the last fp32 bits, which can move a half-precision
# activation by one rounding step before the product.
ACT_TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


def act_mul_cases() -> dict[str, dict]:
    cases = {}
    for dt in _DT:
        # Gemma 3 270M's MLP (2 x 2048) for a 16-row decode step; Llama-3-8B's (2 x 14336) for 3 rows.
        cases[f"{dt}-gelu_tanh-gemma"] = dict(dtype=dt, act="gelu_tanh", shape=(16, 4096))
        cases[f"{dt}-silu-llama"] = dict(dtype=dt, act="silu", shape=(3, 28672))
    cases["bf16-gelu_tanh-3d-large"] = dict(dtype="bf16", act="gelu_tanh", shape=(1, 5, 640), scale=30.0)
    cases["fp32-silu-odd"] = dict(dtype="fp32", act="silu", shape=(7, 2 * 777))
    cases["bf16-silu-empty"] = dict(dtype="bf16", act="silu", shape=(0, 64))
    return cases


def run_act_mul_case(spec: dict, device: str) -> None:
    from agentctx.kernels.act_mul import act_mul, act_mul_reference

    dt = _DT[spec["dtype"]]
    g = torch.Generator().manual_seed(sum(spec["shape"]))
    x = (torch.randn(*spec["shape"], generator=g) * spec.get("scale", 3.0)).to(device=device, dtype=dt)
    want = act_mul_reference(x, spec["act"])
    got = act_mul(x, spec["act"], impl="triton")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.numel() == 0:
        return
    assert torch.isfinite(got).all()
    err = (got.float() - want.float()).abs().max().item()
    bound = ACT_TOL[spec["dtype"]] * max(1.0, want.float().abs().max().item())
    assert err <= bound, f"max abs err {err:.3g} > {bound:.3g}"


def slot_write_cases() -> dict[str, dict]:
    return {
        # Gemma's 16 decode rows into the flat tails (one KV head of 256), k and v strided views
        # of the merged q/k/v product as the attention hook hands them over.
        "bf16-gemma-qkv-views": dict(dtype="bf16", tokens=16, heads=1, dim=256, slots=16 * 64, qkv=4),
        "fp32-llama-contiguous": dict(dtype="fp32", tokens=5, heads=8, dim=128, slots=300, qkv=0),
        "fp16-one-row": dict(dtype="fp16", tokens=1, heads=2, dim=96, slots=40, qkv=2),
        "bf16-int32-slots": dict(dtype="bf16", tokens=6, heads=1, dim=256, slots=100, qkv=4, int32=True),
    }


def run_slot_write_case(spec: dict, device: str) -> None:
    from agentctx.kernels.slot_write import write_slots, write_slots_reference

    dt = _DT[spec["dtype"]]
    t, h, d, n = spec["tokens"], spec["heads"], spec["dim"], spec["slots"]
    g = torch.Generator().manual_seed(t * 31 + n)
    if spec["qkv"]:  # q of qkv * h heads, then k and v: views with the product's row stride
        product = torch.randn(t, (spec["qkv"] + 2) * h * d, generator=g).to(device=device, dtype=dt)
        q_width = spec["qkv"] * h * d
        k = product[:, q_width : q_width + h * d].view(t, h, d)
        v = product[:, q_width + h * d :].view(t, h, d)
        assert t == 1 or not k.is_contiguous()
    else:
        k, v = (torch.randn(t, h, d, generator=g).to(device=device, dtype=dt) for _ in range(2))
    dst = torch.randperm(n, generator=g)[:t].to(device=device, dtype=torch.int32 if spec.get("int32") else torch.int64)
    base_k, base_v = (torch.randn(n, h, d, generator=g).to(device=device, dtype=dt) for _ in range(2))
    want_k, want_v, got_k, got_v = base_k.clone(), base_v.clone(), base_k.clone(), base_v.clone()
    write_slots_reference(want_k, want_v, dst.long(), k, v)
    write_slots(got_k, got_v, dst, k, v, impl="triton")
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v), "slots differ from index_copy_"


def add_norm_cases() -> dict[str, dict]:
    cases = {}
    for dt in _DT:
        # Gemma 3 270M's stream (640 wide) for 16 decode rows, with and without the next norm.
        cases[f"{dt}-offset-gemma"] = dict(dtype=dt, style="offset", shape=(1, 16, 640))
        cases[f"{dt}-offset-last-layer"] = dict(dtype=dt, style="offset", shape=(16, 640), no_norm2=True)
    cases["fp32-scale-d4096"] = dict(dtype="fp32", style="scale", shape=(3, 4096))
    cases["bf16-scale-d96"] = dict(dtype="bf16", style="scale", shape=(5, 96))
    cases["bf16-offset-large-values"] = dict(dtype="bf16", style="offset", shape=(4, 640), scale=300.0)
    cases["bf16-offset-empty"] = dict(dtype="bf16", style="offset", shape=(0, 640))
    return cases


def run_add_norm_case(spec: dict, device: str) -> None:
    """Kernel vs reference: r and y within the norms' tolerance (kernels/rmsnorm.py's cases: only the
    order of the fp32 sums of squares differs)."""
    from agentctx.kernels.add_norm import add_norm2, add_norm2_reference

    from ._rmsnorm_cases import TOL

    dt = _DT[spec["dtype"]]
    g = torch.Generator().manual_seed(7 + sum(spec["shape"]))
    shape, d = spec["shape"], spec["shape"][-1]
    x = (torch.randn(*shape, generator=g) * spec.get("scale", 4.0)).to(device=device, dtype=dt)
    h = (torch.randn(*shape, generator=g) * spec.get("scale", 4.0)).to(device=device, dtype=dt)
    w1, w2 = ((torch.randn(d, generator=g) * 0.3).to(device=device, dtype=dt) for _ in range(2))
    w2 = None if spec.get("no_norm2") else w2
    want_r, want_y = add_norm2_reference(x, h, w1, 1e-6, w2, 1e-5, spec["style"])
    got_r, got_y = add_norm2(x, h, w1, 1e-6, w2, 1e-5, spec["style"], impl="triton")
    assert (got_y is None) == (want_y is None)
    for got, want in ((got_r, want_r), (got_y, want_y)):
        if want is None or want.numel() == 0:
            continue
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
        err = (got.float() - want.float()).abs().max().item()
        bound = TOL[spec["dtype"]] * max(1.0, want.float().abs().max().item())
        assert err <= bound, f"max abs err {err:.3g} > {bound:.3g}"
