"""Device memory for the session benchmark: peak tracking, freeing between phases, the KV capacity probe."""

from __future__ import annotations

import gc
from typing import Any

import torch

from .peers import is_oom
from .report import log, size_label

__all__ = ["free", "peak_gib", "probe_kv_capacity", "reset_peak"]


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return None


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def probe_kv_capacity(name: str, runner, model: torch.nn.Module, kv_bytes_per_token: int, page_size: int,
                      device: torch.device, start_tokens: int, probe: bool = True) -> dict:
    """Allocate a document's KV pages (no prefill) at doubling sizes from ``start_tokens`` until OOM
    (CUDA only), beside the analytic maximum (HBM - weights - 2 GiB) / KV bytes per token."""
    from agentctx.serving.runner.paged_kv import DocKV

    out: dict[str, Any] = {}
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        out["analytic_max_tokens"] = int((total - weights - (2 << 30)) / kv_bytes_per_token)
        out["analytic_basis"] = "(HBM - weights - 2 GiB) / paged KV bytes per token"
    if not probe or device.type != "cuda":
        return out
    n, ok, first_oom = start_tokens, None, None
    free(device)
    for _ in range(10):
        try:
            kv = DocKV.allocate(runner.layout, page_size, n, runner.dtype, device)
            torch.cuda.synchronize(device)
            del kv
            ok = n
        except Exception as exc:  # noqa: BLE001
            if not is_oom(exc):
                raise
            first_oom = n
        free(device)
        if first_oom:
            break
        n *= 2
    out.update({"largest_allocated_tokens": ok, "first_oom_tokens": first_oom,
                "method": "DocKV.allocate at doubling sizes, no prefill"})
    log(f"{name}: KV allocation probe: largest {size_label(ok) if ok else '-'}"
        f", first OOM {size_label(first_oom) if first_oom else 'none up to ' + size_label(n)}")
    return out
