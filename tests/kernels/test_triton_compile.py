"""Ahead-of-time compile of the Triton kernels for sm_90 (H100/H200), on a machine without a GPU.

The CPU interpreter checks the kernels' numerics but not that they compile:
this lowers them through Triton's real NVIDIA pipeline (TTIR -> TTGIR -> PTX ->
cubin with the bundled ptxas) for the launch configurations the heuristics
pick, and checks that the K/V tile loads were software-pipelined into
``cp.async`` copies and that nothing spills registers. Skips without triton.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tempfile

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                       reason="kernels are interpreted in this process"),
]

_NOT_DIVISIBLE = {"Tq", "chunks_per_split", "num_splits", "qk_scale", "softcap"}


def _compile(fn, arg_types: dict[str, str], constexprs: dict, num_warps: int, num_stages: int):
    """Compile a @triton.jit function for sm_90 the way the launcher would specialise it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
            continue
        sig[name] = arg_types[name]
        # Real launches specialise 16-divisible pointers/strides; without it loads are not vectorised.
        if name not in _NOT_DIVISIBLE:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


def _ptxas_report(ptx: str) -> str | None:
    import triton

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", src, "-o", os.path.join(d, "k.cubin")],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


# (dtype, Hq, Hkv, D, Tq, P, softcap, direct): the benchmark shapes plus prompt-sized Tq.
SHAPES = [
    ("bf16", 4, 1, 256, 1, 256, False, False),   # Gemma-3-270M decode, split-K
    ("bf16", 32, 8, 128, 1, 256, False, False),  # Llama-3-8B decode, split-K
    ("bf16", 8, 4, 256, 1, 256, True, True),     # Gemma-2 style softcap, single split
    ("fp16", 32, 8, 128, 7, 16, False, False),
    ("fp32", 4, 1, 64, 1, 16, False, True),      # fp32 uses IEEE dots
    ("bf16", 32, 8, 128, 300, 256, False, True),  # question prompt: BLOCK_M = 64
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_attend_kernel_compiles_for_sm90(shape):
    from agentctx.kernels import triton_attend as ta

    dt, Hq, Hkv, D, Tq, P, softcap, direct = shape
    cfg = ta.choose_config(1, Tq, Hq, Hkv, D, P, 64, torch.device("cpu"))
    consts = dict(HQ=Hq, HKV=Hkv, GROUP=Hq // Hkv, D=D, BLOCK_D=ta._next_pow2(D), P=P, BLOCK_M=cfg.block_m,
                  BLOCK_N=cfg.block_n, CHUNKS_PER_PAGE=-(-P // cfg.block_n), USE_SOFTCAP=softcap,
                  DIRECT_OUT=direct, DOT_PRECISION="ieee" if dt == "fp32" else "tf32", UPCAST_DOT=False)
    types = {n: "i32" for n in ta._attend_pages_kernel.arg_names}
    types.update(Q=f"*{dt}", K=f"*{dt}", V=f"*{dt}", O=f"*{dt}", BT="*i32", NB="*i32", SL="*i32",
                 LSE="*fp32", OP="*fp32", LSEP="*fp32", qk_scale="fp32", softcap="fp32")
    kernel = _compile(ta._attend_pages_kernel, types, consts, cfg.num_warps, cfg.num_stages)
    ttgir = kernel.asm["ttgir"]
    # K and V tiles are prefetched with async copies (the loop is software-pipelined).
    assert len(re.findall(r"async_copy_global_to_local %\S+, %\S+ mask %\S+ other", ttgir)) >= 2, \
        "K/V tile loads were not pipelined"
    assert kernel.metadata.shared <= 100 * 1024, f"shared memory {kernel.metadata.shared} B leaves < 2 programs/SM"
    report = _ptxas_report(kernel.asm["ptx"])
    if report is not None:
        assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("D", [64, 128, 256])
def test_merge_kernel_compiles_for_sm90(D):
    from agentctx.kernels import triton_attend as ta

    types = {n: "i32" for n in ta._merge_splits_kernel.arg_names}
    types.update(OP="*fp32", LSEP="*fp32", O="*bf16", LSE="*fp32")
    consts = dict(HQ=4, D=D, BLOCK_DR=min(D, 64), BLOCK_S=64)
    kernel = _compile(ta._merge_splits_kernel, types, consts, num_warps=4, num_stages=3)
    assert "ptx" in kernel.asm


@pytest.mark.parametrize("lowp_pv", [True, False])
def test_window_kernel_compiles_for_sm90(lowp_pv):
    """The slot kernel as a 16-agent Gemma decode step launches it for a sliding layer (per-token tiles,
    split-K): with P @ V in bf16 its second product is a bf16 tensor-core dot, and nothing spills. With
    P @ V in fp32 (the kernel before, and fp32 buffers) it spilled 384 bytes at 255 registers."""
    from agentctx.kernels import tail_tiles
    from agentctx.kernels import triton_tail as tt

    consts = dict(GROUP=4, HQ=4, D=256, BLOCK_D=256, BLOCK_M=tail_tiles.WINDOW_BLOCK_M, BLOCK_N=tt._block_n(256, 16),
                  NUM_SPLITS=8, USE_WINDOW=True, HAS_PAGES=False, SPLIT_OUT=True, USE_SOFTCAP=False,
                  DOT_PRECISION="tf32", UPCAST_DOT=False, PER_TOKEN=True, LOWP_PV=lowp_pv)
    types = {n: "i32" for n in tt._slots_kernel.arg_names}
    types.update(Q="*bf16", K="*bf16", V="*bf16", QS="*i64", QB="*i64", OP="*bf16", LP="*fp32", O="*bf16",
                 OPS="*fp32", LPS="*fp32", qk_scale="fp32", softcap="fp32")
    kernel = _compile(tt._slots_kernel, types, consts, num_warps=4, num_stages=2)
    dots = re.findall(r"tt\.dot .*: tensor<\w+x\w+x(\w+)> \* tensor<\w+x\w+x(\w+)>", kernel.asm["ttir"])
    assert len(dots) == 2, dots
    assert dots[1] == (("bf16", "bf16") if lowp_pv else ("f32", "f32")), dots
    report = _ptxas_report(kernel.asm["ptx"])
    if report is not None and lowp_pv:
        assert "0 bytes spill stores" in report, report


def test_step_kernels_compile_for_sm90():
    """The decode step's small kernels (act_mul, slot writes, the sandwich residual step) at Gemma's shapes."""
    from agentctx.kernels import triton_act_mul, triton_add_norm, triton_slot_write

    def types_of(fn, **ptrs):
        t = {n: "i32" for n in fn.arg_names}
        t.update(ptrs)
        return t

    k = _compile(triton_act_mul._act_mul_kernel, types_of(triton_act_mul._act_mul_kernel, GU="*bf16", O="*bf16"),
                 dict(GELU_TANH=True, BLOCK=1024), num_warps=4, num_stages=1)
    assert "ptx" in k.asm
    fn = triton_slot_write._write_slots_kernel
    k = _compile(fn, types_of(fn, FK="*bf16", FV="*bf16", DST="*i64", K="*bf16", V="*bf16"), dict(BLOCK_D=256),
                 num_warps=2, num_stages=1)
    assert "ptx" in k.asm
    fn = triton_add_norm._add_norm2_kernel
    for offset in (True, False):
        k = _compile(fn, types_of(fn, X="*bf16", H="*bf16", W1="*bf16", W2="*bf16", R="*bf16", Y="*bf16",
                                  eps1="fp32", eps2="fp32"),
                     dict(HAS_NORM2=True, OFFSET=offset, BLOCK_D=1024), num_warps=4, num_stages=1)
        report = _ptxas_report(k.asm["ptx"])
        if report is not None:
            assert "0 bytes spill stores" in report, report
