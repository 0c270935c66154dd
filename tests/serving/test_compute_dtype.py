"""The compute dtype a model runs in when none is named (serving/compute_dtype.py)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.compute_dtype import CPU_DTYPE_ENV, cpu_has_native_bf16, default_dtype


def _cpuinfo(tmp_path, flags: str) -> str:
    p = tmp_path / f"cpuinfo-{abs(hash(flags))}"
    p.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    return str(p)


def test_cpuinfo_flags(tmp_path):
    assert cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni"))
    assert cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu amx_bf16 amx_tile"))
    assert not cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu sse2 avx2 avx512f avx512bw"))
    # "avx512_bf16" only as a substring of another word is not the flag
    assert not cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu xavx512_bf16y"))
    assert not cpu_has_native_bf16(str(tmp_path / "missing"))


def test_env_override_and_bad_value(monkeypatch):
    monkeypatch.setenv(CPU_DTYPE_ENV, "bfloat16")
    assert default_dtype("cpu") is torch.bfloat16
    monkeypatch.setenv(CPU_DTYPE_ENV, "float32")
    assert default_dtype("cpu") is torch.float32
    assert default_dtype("cuda:0") is torch.bfloat16  # a GPU is bf16 whatever the CPU's setting
    monkeypatch.setenv(CPU_DTYPE_ENV, "float64")
    with pytest.raises(ValueError, match="AGENTCTX_CPU_DTYPE"):
        default_dtype("cpu")
    monkeypatch.delenv(CPU_DTYPE_ENV)
    assert default_dtype("cpu") is (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)


@pytest.mark.model
def test_bf16_engine_on_cpu_close_to_fp32(monkeypatch):
    """The embedded Gemma in the bf16 default answers like fp32: the document's last logits within
    a few percent of fp32's (bf16 keeps 8 bits of mantissa) with the same top token, and a
    greedy answer that starts the same."""
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.types import GenerateRequest

    text = " ".join(f"Clause {i}: the supplier shall deliver item {i * 7 % 13} on day {i}." for i in range(60))
    req = GenerateRequest("c", "Question: On which day is item 5 delivered?\nAnswer:", max_new_tokens=6)
    out = {}
    for name in ("float32", "bfloat16"):
        monkeypatch.setenv(CPU_DTYPE_ENV, name)
        eng = LocalEngine(None, device="cpu")
        assert eng.runner.dtype == getattr(torch, name)
        eng.prefill("c", eng.tokenize_document(text), progress=False)
        logits = eng.kv.get("c").last_logits.float()
        out[name] = (logits, eng.generate(req).token_ids)
        eng.close()
    (a, ta), (b, tb) = out["float32"], out["bfloat16"]
    assert ((a - b).norm() / a.norm()).item() < 0.05
    assert a.argmax() == b.argmax()
    assert ta[:2] == tb[:2]
