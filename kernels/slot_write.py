"""Write a step's new keys and values into slot buffers: one kernel for both on CUDA.

Each layer of a batched decode step stores its rows' new K and V at their slots of the flat
tail (or window) buffers before attending them (serving/runner/batch_slots.py). As two
``index_copy_`` calls that was 36 kernels of a Gemma 3 270M step; :func:`write_slots` does a
layer's K and V in one launch, reading them where the merged q/k/v product left them (any
strides with a unit-stride head dim). :func:`write_slots_reference` is the ``index_copy_``
pair it replaces, and the CPU path.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch
from torch import Tensor

__all__ = ["write_slots", "write_slots_reference"]

log = logging.getLogger(__name__)
# (device, dtype, heads, dim) -> True (the kernel wrote what index_copy_ writes on its first call)
# or False (it did not, or did not compile: index_copy_ from then on, with a warning).
_checked: dict[tuple, bool] = {}


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
    _checked_kernel(flat_k, flat_v, dst, k, v)


def _checked_kernel(flat_k: Tensor, flat_v: Tensor, dst: Tensor, k: Tensor, v: Tensor) -> None:
    """The Triton kernel, its first call per signature checked against index_copy_ on copies of the
    buffers (eager: the batched rows run each forward once before capturing it)."""
    sig = (str(k.device), k.dtype, k.shape[1], k.shape[2])
    state = _checked.get(sig)
    if state is False:
        write_slots_reference(flat_k, flat_v, dst, k, v)
        return
    from .triton_slot_write import triton_write_slots  # lazy: triton is optional

    if state is True:
        triton_write_slots(flat_k, flat_v, dst, k, v)
        return
    want_k, want_v = flat_k.clone(), flat_v.clone()
    write_slots_reference(want_k, want_v, dst, k, v)
    try:
        triton_write_slots(flat_k, flat_v, dst, k, v)
        ok, why = torch.equal(flat_k, want_k) and torch.equal(flat_v, want_v), "its slots differ from index_copy_"
    except Exception as exc:  # noqa: BLE001 - e.g. a compile error: stay correct on index_copy_
        ok, why = False, f"{type(exc).__name__}: {exc}"
    _checked[sig] = ok
    if not ok:
        log.warning("Triton slot write %s failed its first-call check (%s); using index_copy_", sig, why)
        flat_k.copy_(want_k)
        flat_v.copy_(want_v)


@functools.cache
def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None
