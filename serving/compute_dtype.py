"""The dtype a model computes in when the user names none (``model.dtype`` unset).

On a GPU: bfloat16. On a CPU: bfloat16 where the CPU has native bf16 dot products (x86
``avx512_bf16`` or ``amx_bf16``; Arm ``bf16``), else float32. On the 2-core EPYC box of
BENCHMARKS §4i a 1024 x 640 x 4096 product runs at 558 GFLOP/s in bf16 against 68 in fp32, and the
embedded Gemma 3 270M prefills ~2x and decodes ~1.6x faster, at a perplexity within a fraction of a
percent of fp32's (measured there). Without those instructions bf16 products are emulated and
slower than fp32, so such CPUs keep fp32.

``AGENTCTX_CPU_DTYPE`` (float32 | bfloat16) overrides the CPU's choice: the test suite pins float32,
the dtype its exactness checks (logits against transformers' own forward, greedy tokens of a
batched row against the request alone) are stated in.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

__all__ = ["default_dtype", "cpu_has_native_bf16", "cpu_has_any", "CPU_DTYPE_ENV"]

CPU_DTYPE_ENV = "AGENTCTX_CPU_DTYPE"
_NAMES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 /proc/cpuinfo "flags"; Arm "Features"


def cpu_has_any(flags: set[str] | frozenset[str], cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU advertises any of ``flags`` (x86 "flags" / Arm "Features" lines of
    /proc/cpuinfo; False where it cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features") and flags & set(value.split()):
            return True
    return False


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU advertises bf16 dot-product instructions (False where it cannot be read)."""
    return cpu_has_any(_BF16_FLAGS, cpuinfo)


def default_dtype(device: str | torch.device | None) -> torch.dtype:
    """The compute dtype for ``device`` (None: CUDA when available, else the CPU)."""
    on_gpu = (str(device) if device is not None else "").startswith("cuda") or (
        device is None and torch.cuda.is_available())
    if on_gpu:
        return torch.bfloat16
    named = os.environ.get(CPU_DTYPE_ENV, "").strip().lower()
    if named:
        if named not in _NAMES:
            raise ValueError(f"{CPU_DTYPE_ENV} must be float32 or bfloat16, got {named!r}")
        return _NAMES[named]
    return torch.bfloat16 if _this_cpu_has_bf16() else torch.float32


@functools.lru_cache(maxsize=1)
def _this_cpu_has_bf16() -> bool:
    return cpu_has_native_bf16()
