"""Write a step's new keys and values into slot buffers: one kernel for both on CUDA.

Each layer of a batched decode step stores its rows' new K and V at their slots of the flat
tail (or window) buffers before attending them (serving/runner/batch_slots.py). As two
``index_copy_`` calls that was 36 kernels of a Gemma 3 270M step; :func:`write_slots` does a
layer's K and V in one launch, reading them where the merged q/k/v product left them (any
strides with a unit-stride head dim). :func:`write_slots_reference` is the ``index_copy_``
pair it replaces, and the CPU path.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["write_slots", "write_slots_reference"]


def _validate(flat_k: Tensor, flat_v: Tensor, dst: Tensor, k: Tensor, v: Tensor) -> None:
    if flat_k.dim() != 3 or flat_v.shape != flat_k.shape or k.dim() != 3 or v.shape != k.shape:
        raise ValueError(f"write_slots: buffers must be (N, H, D) alike and k, v (T, H, D) alike; got "
                         f"{tuple(flat_k.shape)}, {tuple(flat_v.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[1:] != flat_k.shape[1:]:
        raise ValueError(f"write_slots: k {tuple(k.shape)} does not fit the buffer {tuple(flat_k.shape)}")
    if dst.shape != (k.shape[0],) or dst.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"write_slots: dst must be ({k.shape[0]},) int32/int64, got {tuple(dst.shape)} {dst.dtype}")
    if len({flat_k.dtype, flat_v.dtype, k.dtype, v.dtype}) != 1:
        raise ValueError(f"write_slots: dtypes differ: {flat_k.dtype}, {flat_v.dtype}, {k.dtype}, {v.dtype}")
    if len({t.device for t in (flat_k, flat_v, dst, k, v)}) != 1:
        raise ValueError("write_slots: every tensor must be on one device")


def write_slots_reference(flat_k: Tensor, flat_v: Tensor, dst: Tensor, k: Tensor, v: Tensor) -> None:
    flat_k.index_copy_(0, dst, k)
    flat_v.index_copy_(0, dst, v)


def write_slots(flat_k: Tensor, flat_v: Tensor, dst: Tensor, k: Tensor, v: Tensor, impl: str = "auto",
                check: bool = True) -> None:
    """``flat_k[dst[i]] = k[i]`` and ``flat_v[dst[i]] = v[i]`` for every i, in place.

    impl: "auto" (Triton on CUDA when installed), "torch" or "triton". ``dst`` values are not
    checked on the device (that would synchronise); distinct in-range slots are the caller's
    contract, as for ``index_copy_``. check=False skips the shape checks (hot paths)."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"write_slots: impl must be auto, torch or triton, got {impl!r}")
    if check:
        _validate(flat_k, flat_v, dst, k, v)
    if impl == "torch" or (impl == "auto" and (k.device.type != "cuda" or not _has_triton())):
        write_slots_reference(flat_k, flat_v, dst, k, v)
        return
    from .triton_slot_write import triton_write_slots  # lazy: triton is optional

    triton_write_slots(flat_k, flat_v, dst, k, v)


_TRITON: list[bool] = []


def _has_triton() -> bool:
    if not _TRITON:
        import importlib.util

        _TRITON.append(importlib.util.find_spec("triton") is not None)
    return _TRITON[0]
