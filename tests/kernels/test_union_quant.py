"""The union kernel over quantised pages (fp8 e4m3 / int8 with scales), on CPU.

The plain-PyTorch reference over quantised pools against the float reference over the same pools
dequantised, the launcher's checks, ``attend_selected``'s dispatch of quantised pools, and the
Triton kernel in Triton's CPU interpreter (a subprocess, as test_triton_interpret.py; cases and
bounds in _union_quant_cases). The kernel on a GPU: test_union_quant_gpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentctx.kernels import attend_selected, attend_selected_quant
from agentctx.kernels.kv_quant import QuantPages, quantize_pages
from agentctx.kernels.union_attend import attend_union, attend_union_reference, union_tables

from ._union_quant_cases import union_quant_cases

_REPO = Path(__file__).resolve().parents[2]
_HAS_TRITON = importlib.util.find_spec("triton") is not None


def _pools(dtype: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    s, p, hkv, d = 9, 16, 2, 32
    k, v = torch.randn(s, p, hkv, d, generator=g), torch.randn(s, p, hkv, d, generator=g)
    lens = torch.full((s,), p, dtype=torch.int32)
    lens[-1] = 7
    q = torch.randn(3, 8, d, generator=g)
    plans = [(0, 4, 8), (4, 5), tuple(range(s))]
    union, bits = union_tables(plans, s)
    tables = (torch.tensor(union + [0], dtype=torch.int32), torch.tensor([len(union)], dtype=torch.int32),
              torch.tensor(bits + [-1]), lens)
    kq = quantize_pages(k, dtype, part="k", slot_lens=lens)
    vq = quantize_pages(v, dtype, part="v", slot_lens=lens)
    return q, kq, vq, tables


@pytest.mark.parametrize("dtype", ["fp8", "int8"])
def test_reference_over_quantised_pools_is_the_float_reference_over_their_values(dtype):
    q, kq, vq, (union, n, bits, lens) = _pools(dtype)
    got = attend_union(q, kq, vq, union, n, bits, lens, 0.2, softcap=30.0)
    want = attend_union_reference(q, kq.dequantize(), vq.dequantize(), union, n, bits, lens, 0.2, softcap=30.0)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    # A quantised K with float V (and the reverse) is a valid mix too.
    mixed = attend_union(q, kq, vq.dequantize(), union, n, bits, lens, 0.2)
    torch.testing.assert_close(mixed[0], attend_union_reference(q, kq.dequantize(), vq.dequantize(), union, n,
                                                                bits, lens, 0.2)[0])


def test_launcher_checks_quantised_pools():
    q, kq, vq, (union, n, bits, lens) = _pools("int8")
    with pytest.raises(ValueError, match="scale"):
        attend_union(q, QuantPages(kq.data, kq.scale.double()), vq, union, n, bits, lens, 0.2)
    with pytest.raises(ValueError, match="fits no granularity"):
        attend_union(q, QuantPages(kq.data, kq.scale[:, :, :1]), vq, union, n, bits, lens, 0.2)
    with pytest.raises(ValueError, match="page dtype"):
        attend_union(q, kq, vq.dequantize(torch.float16), union, n, bits, lens, 0.2)


@pytest.mark.parametrize("impl", ["auto", "torch", "flash"])
def test_attend_selected_takes_quantised_pools(impl):
    q, kq, vq, (_, _, _, lens) = _pools("fp8")
    bt = torch.tensor([[0, 3, 8]], dtype=torch.int32)
    nb = torch.tensor([3], dtype=torch.int32)
    want = attend_selected_quant(q[:1].unsqueeze(1), kq, vq, bt, nb, lens, 0.2, impl="reference")
    got = attend_selected(q[:1].unsqueeze(1), kq, vq, bt, nb, lens, 0.2, impl=impl)
    torch.testing.assert_close(got[0], want[0])
    with pytest.raises(ValueError, match="impl"):
        attend_selected(q[:1].unsqueeze(1), kq, vq, bt, nb, lens, 0.2, impl="cuda")


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, str]:
    if not _HAS_TRITON:
        pytest.skip("triton is not installed")
    proc = subprocess.run([sys.executable, "-m", "tests.kernels._interp_runner", "union_quant"], cwd=_REPO,
                          env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"interpreter runner failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(union_quant_cases()))
def test_union_kernel_on_quantised_pages_in_the_interpreter(interpreter_results, name):
    result = interpreter_results.get(name, "missing from runner output")
    assert result == "ok", result


# The sm_90 compile of the union kernel over fp8 pages, both dot dtypes (kernels.triton_dequant.dot_f16):
# with DOT_F16 the tiles reach the dots as fp16 (e4m3 -> f16 is one conversion), without it as bf16.
@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"), reason="interpreted in this process")
@pytest.mark.parametrize("dot_f16", [True, False])
def test_union_kernel_on_fp8_compiles_for_sm90(dot_f16):
    import re

    from agentctx.kernels import triton_union as tu
    from agentctx.kernels.kv_quant import DEFAULT_GRANULARITY
    from agentctx.kernels.triton_dequant import SCALE_MODE

    from .test_triton_compile import _compile, _ptxas_report

    hq, hkv, d, p, rows = 32, 8, 128, 256, 16  # Llama-3-8B heads (Gemma's 256-wide head spills 16 bytes in fp16)
    block_m, _ = tu._tiles(rows * hq // hkv)
    block_n = tu._block_n(d, block_m, p, fp8=True)  # the launch rule for fp8 pages
    qd = torch.float8_e4m3fn
    consts = dict(HQ=hq, GROUP=hq // hkv, D=d, BLOCK_D=d, P=p, BLOCK_M=block_m, BLOCK_N=block_n,
                  CHUNKS_PER_PAGE=-(-p // block_n), K_MODE=SCALE_MODE[DEFAULT_GRANULARITY[(qd, "k")]],
                  V_MODE=SCALE_MODE[DEFAULT_GRANULARITY[(qd, "v")]], USE_SOFTCAP=False,
                  DOT_PRECISION="tf32", UPCAST_DOT=False, DOT_F16=dot_f16)
    types = {n: "i32" for n in tu._union_kernel.arg_names}
    types.update(Q="*bf16", K="*fp8e4nv", V="*fp8e4nv", KS="*fp32", VS="*fp32", UNION="*i32", ULEN="*i32",
                 BITS="*i64", SL="*i32", OP="*fp32", LSEP="*fp32", qk_scale="fp32", softcap="fp32")
    kernel = _compile(tu._union_kernel, types, consts, 4, 3)
    dots = re.findall(r"tt\.dot[^\n]*", kernel.asm["ttgir"]) + re.findall(r"warp_group_dot[^\n]*", kernel.asm["ttgir"])
    want = "f16" if dot_f16 else "bf16"
    assert dots and all("xf8E4M3FN" not in line for line in dots), dots
    assert any(f"x{want}" in line for line in dots), dots
    report = _ptxas_report(kernel.asm["ptx"])
    if report is not None:
        assert "0 bytes spill stores" in report, report


@pytest.mark.skipif(not _HAS_TRITON, reason="triton is not installed")
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"), reason="interpreted in this process")
def test_fp16_dots_only_for_fp8_pages_and_a_bf16_query(monkeypatch):
    from agentctx.kernels.triton_dequant import dot_f16

    k = torch.randn(2, 16, 1, 32)
    fp8, int8 = quantize_pages(k, "fp8"), quantize_pages(k, "int8")
    q = torch.randn(3, 4, 32, dtype=torch.bfloat16)
    assert dot_f16(q, fp8)
    assert not dot_f16(q, int8)  # int8 -> bf16 is the cheap conversion
    assert not dot_f16(q, k.bfloat16())  # float pages keep their dtype's dots
    assert not dot_f16(q.float(), fp8)  # an fp32 query keeps fp32 dots
    monkeypatch.setenv("AGENTCTX_QUANT_DOT_F16", "0")
    assert not dot_f16(q, fp8)
