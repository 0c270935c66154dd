"""Cases for the RoPE kernel, shared by the GPU test and the CPU interpreter run.

Importing this module does not import triton. Run as a module under Triton's
interpreter it checks every case on CPU and prints one JSON line (test_rope.py does
this in a subprocess, because TRITON_INTERPRET must be set before the kernels are
imported and must not leak into the parent):

    TRITON_INTERPRET=1 python -m tests.kernels._rope_cases
    -> {"case-id": "ok" | "<error text>", ...}
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import traceback

import torch

__all__ = ["TOL", "make_rope_inputs", "rope_cases", "run_rope_case"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Max abs error vs float64 RoPE of the same rounded inputs, relative to the output's max
# magnitude. The kernel computes in fp32 and rounds once: half an ulp (fp16 2^-11, bf16
# 2^-8 relative). Triton 3.6's CPU interpreter truncates fp32 -> bf16 instead of rounding
# (see _tail_cases.py), a whole ulp (2^-7), so the bf16 bound allows that; on a GPU the
# 1.25x-of-torch check below is the tighter one.
TOL = {"fp32": 1e-6, "fp16": 1e-3, "bf16": 1e-2}
_SHAPES = {"gemma": (4, 1, 256), "llama": (32, 8, 128)}  # (Hq, Hkv, D)


def rope_cases(small: bool = False) -> dict[str, dict]:
    """small: the interpreter's grid, with T=300 (600 programs, ~6 s each there) only twice."""
    cases = {}
    grid = itertools.product(_DT, _SHAPES.items(), ((1, 1), (1, 7), (2, 7), (1, 300)))
    for i, (dt, (arch, (hq, hkv, d)), (b, t)) in enumerate(grid):
        if small and t == 300 and (dt, arch) not in (("fp16", "gemma"), ("bf16", "llama")):
            continue
        cases[f"{dt}-{arch}-b{b}-t{t}"] = dict(dtype=dt, Hq=hq, Hkv=hkv, D=d, B=b, T=t, seed=i)
    # More heads than one program takes (_MAX_TILE): q in two tiles, k in one.
    cases["bf16-hq64-hkv8-d128"] = dict(dtype="bf16", Hq=64, Hkv=8, D=128, B=1, T=5, seed=40)
    # D/2 not a power of two, MHA (as many k heads as q heads).
    cases["fp16-mha-d80"] = dict(dtype="fp16", Hq=3, Hkv=3, D=80, B=2, T=4, seed=41)
    # One position table for the whole batch: cos/sin (1, T, D) broadcast over B.
    cases["bf16-shared-table"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, B=3, T=6, seed=42, shared_table=True)
    # Inputs already (B, H, T, D)-contiguous, and inputs whose D is strided (copied first).
    cases["fp32-contiguous"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, B=2, T=9, seed=43, layout="bhtd")
    cases["fp16-strided-d"] = dict(dtype="fp16", Hq=4, Hkv=2, D=64, B=1, T=5, seed=44, layout="strided_d")
    # Tables whose halves differ: the kernel must not assume transformers' repeated halves.
    cases["fp32-random-tables"] = dict(dtype="fp32", Hq=4, Hkv=2, D=32, B=2, T=3, seed=45, random_tables=True)
    cases["bf16-empty"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, B=1, T=0, seed=46)
    return cases


def make_rope_inputs(spec: dict, device: str) -> tuple[torch.Tensor, ...]:
    """q (B, Hq, T, D), k (B, Hkv, T, D), cos, sin (B or 1, T, D), as transformers passes them."""
    g = torch.Generator().manual_seed(spec["seed"])
    dt = _DT[spec["dtype"]]
    b, t, d = spec["B"], spec["T"], spec["D"]

    def heads(h):
        layout = spec.get("layout", "bthd")
        if layout == "bhtd":
            x = torch.randn(b, h, t, d, generator=g)
        elif layout == "strided_d":
            x = torch.randn(b, t, h, 2 * d, generator=g)[..., ::2].transpose(1, 2)
        else:  # the projection viewed (B, T, H, D) and transposed: non-contiguous
            x = torch.randn(b, t, h, d, generator=g).transpose(1, 2)
        return (x * 2.0).to(device=device, dtype=dt)

    q, k = heads(spec["Hq"]), heads(spec["Hkv"])
    tb = 1 if spec.get("shared_table") else b
    if spec.get("random_tables"):
        cos, sin = torch.randn(tb, t, d, generator=g), torch.randn(tb, t, d, generator=g)
    else:  # transformers' default RoPE tables at scattered positions up to 100K
        pos = torch.randint(0, 100_000, (tb, t), generator=g).double()
        inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = pos[..., None] * inv_freq
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    return q, k, cos.to(device=device, dtype=dt), sin.to(device=device, dtype=dt)


def run_rope_case(spec: dict, device: str) -> None:
    """Run the Triton kernel and compare with float64 RoPE; raises on mismatch."""
    from agentctx.kernels.rope import apply_rope, apply_rope_reference
    from agentctx.kernels.triton_rope import triton_rope

    dt = _DT[spec["dtype"]]
    q, k, cos, sin = make_rope_inputs(spec, device)
    got = apply_rope(q, k, cos, sin, impl="triton")
    torch_path = apply_rope_reference(q, k, cos, sin)
    exact = apply_rope_reference(*(x.double() for x in (q, k, cos, sin)))
    for name, g_, t_, e_ in zip("qk", got, torch_path, exact):
        assert g_.shape == t_.shape and g_.dtype == t_.dtype == dt, (name, g_.shape, g_.dtype, t_.shape)
        # transformers' elementwise ops keep the inputs' (B, T, H, D) memory order; so does the kernel.
        assert g_.transpose(1, 2).is_contiguous() == t_.transpose(1, 2).is_contiguous(), (name, g_.stride())
        if e_.numel() == 0:
            continue
        assert torch.isfinite(g_.float()).all(), f"{name}: non-finite output"
        err = (g_.double() - e_).abs().max().item()
        bound = TOL[spec["dtype"]] * max(1.0, e_.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3g} > {bound:.3g}"
        # In half precision the kernel must be at least as close to the exact answer as
        # transformers' op order (which rounds three times); bf16 only where Triton rounds.
        if dt == torch.float16 or (dt == torch.bfloat16 and device != "cpu"):

            def rel(x, e_=e_):
                return ((x.double() - e_).norm() / e_.norm()).item()

            assert rel(g_) <= 1.25 * rel(t_) + 1e-7, f"{name}: kernel err {rel(g_):.3g} vs torch {rel(t_):.3g}"
    # Poisoned outputs with a layout unlike the inputs': every element is written, and the
    # output strides are honoured.
    poisoned = tuple(torch.full(x.shape, float("nan"), dtype=dt, device=device) for x in got)
    again = triton_rope(q, k, cos, sin, out=poisoned)
    for before, after, buf in zip(got, again, poisoned):
        assert after.data_ptr() == buf.data_ptr()
        assert torch.equal(after, before), "results differ with (B, H, T, D)-contiguous outputs"


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set", file=sys.stderr)
        return 2
    from agentctx.kernels import triton_rope  # noqa: F401  (decorated under the interpreter)

    results = {}
    for name, spec in rope_cases(small=True).items():
        try:
            run_rope_case(spec, device="cpu")
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - report every failure, do not stop at the first
            results[name] = traceback.format_exc(limit=4)[-3000:]
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
