"""Cases for the RMSNorm kernel, shared by the GPU test and the CPU interpreter runner.

Importing this module does not import triton.
"""

from __future__ import annotations

import torch

__all__ = ["rmsnorm_cases", "run_rmsnorm_case", "TOL"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Max abs error vs the reference, relative to the output's max magnitude. The kernel and
# transformers differ only in the order of the fp32 sum of squares, which can move a
# half-precision output by one rounding step.
TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


def rmsnorm_cases() -> dict[str, dict]:
    cases = {}
    for dt in _DT:
        for style in ("offset", "scale"):
            # Gemma 3 270M hidden (640, not a power of two) and its q/k norms' (T, 1, H, 256) shape.
            cases[f"{dt}-{style}-hidden640"] = dict(dtype=dt, style=style, shape=(1, 9, 640))
            cases[f"{dt}-{style}-heads"] = dict(dtype=dt, style=style, shape=(1, 3, 4, 256))
    cases["bf16-scale-d4096"] = dict(dtype="bf16", style="scale", shape=(5, 4096))
    cases["fp32-offset-d80"] = dict(dtype="fp32", style="offset", shape=(7, 80))
    cases["bf16-scale-fp32-weight"] = dict(dtype="bf16", style="scale", shape=(4, 128), weight_dtype="fp32")
    cases["fp32-scale-strided"] = dict(dtype="fp32", style="scale", shape=(6, 64), strided=True)
    # The q/k norms' input with merged projections: (1, H, T, D) heads-first views of a (T, (Hq + 2 Hkv) D)
    # product, read in place (no 2-D view addresses them).
    cases["bf16-offset-qkv-view"] = dict(dtype="bf16", style="offset", shape=(1, 4, 3, 256), qkv_view=True)
    cases["fp32-scale-qkv-view"] = dict(dtype="fp32", style="scale", shape=(1, 8, 5, 128), qkv_view=True)
    cases["fp32-scale-5d"] = dict(dtype="fp32", style="scale", shape=(2, 1, 3, 2, 64))
    cases["bf16-offset-empty"] = dict(dtype="bf16", style="offset", shape=(0, 64))
    cases["fp16-scale-large-values"] = dict(dtype="fp16", style="scale", shape=(3, 256), scale=200.0)
    return cases


def run_rmsnorm_case(spec: dict, device: str) -> None:
    """Run the Triton kernel and compare with the torch reference; raises on mismatch."""
    from agentctx.kernels.rmsnorm import rms_norm, rms_norm_reference

    dt = _DT[spec["dtype"]]
    wdt = _DT[spec.get("weight_dtype", spec["dtype"])]
    g = torch.Generator().manual_seed(hash(tuple(spec["shape"])) % 1000)
    shape = spec["shape"]
    x = torch.randn(*shape[:-1], shape[-1] * (2 if spec.get("strided") else 1), generator=g) * spec.get("scale", 2.0)
    if spec.get("strided"):
        x = x[..., ::2]  # last-dim stride 2: the launcher must copy to unit stride
    x = x.to(device=device, dtype=dt)
    if spec.get("qkv_view"):
        _, h, t, d = shape
        product = (torch.randn(t, (h + 2) * d, generator=g) * 2.0).to(device=device, dtype=dt)  # q, then k, v
        x = product[:, : h * d].view(1, t, h, d).transpose(1, 2)
        assert not x.is_contiguous()
    w = (torch.randn(shape[-1], generator=g) * 0.3).to(device=device, dtype=wdt)
    want = rms_norm_reference(x, w, 1e-6, spec["style"])
    got = rms_norm(x, w, 1e-6, spec["style"], impl="triton")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.numel() == 0:
        return
    err = (got.float() - want.float()).abs().max().item()
    bound = TOL[spec["dtype"]] * max(1.0, want.float().abs().max().item())
    assert err <= bound, f"max abs err {err:.3g} > {bound:.3g}"
