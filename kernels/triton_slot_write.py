"""Triton kernel for :func:`kernels.slot_write.write_slots`: grid (tokens, heads), each program
copies one head row of K and one of V to the token's slot. Importing this module requires
``triton``; with ``TRITON_INTERPRET=1`` set before import it runs on CPU tensors (tests)."""

from __future__ import annotations

from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised only without triton
    raise ImportError("kernels.triton_slot_write needs the 'triton' package (pip install triton)") from exc

from .triton_attend import INTERPRET

__all__ = ["triton_write_slots"]


@triton.jit
def _write_slots_kernel(FK, FV, DST, K, V, stride_fn, stride_fh, stride_kt, stride_kh, stride_vt, stride_vh, D,
                        BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    slot = tl.load(DST + t).to(tl.int64)
    k = tl.load(K + t * stride_kt + h * stride_kh + cols, mask=mask)
    v = tl.load(V + t * stride_vt + h * stride_vh + cols, mask=mask)
    tl.store(FK + slot * stride_fn + h * stride_fh + cols, k, mask=mask)
    tl.store(FV + slot * stride_fn + h * stride_fh + cols, v, mask=mask)


def triton_write_slots(flat_k: Tensor, flat_v: Tensor, dst: Tensor, k: Tensor, v: Tensor) -> None:
    """See kernels.slot_write.write_slots (inputs validated there)."""
    if k.device.type != "cuda" and not (INTERPRET and k.device.type == "cpu"):
        raise ValueError(f"triton write_slots needs CUDA tensors (or TRITON_INTERPRET=1 with CPU ones), got {k.device}")
    t, h, d = k.shape
    if t == 0:
        return
    if flat_k.stride() != flat_v.stride() or flat_k.stride(2) != 1:
        raise ValueError("triton write_slots: the K and V buffers need one layout with a unit-stride head dim")
    if k.stride(2) != 1:
        k = k.contiguous()
    if v.stride(2) != 1:
        v = v.contiguous()
    _write_slots_kernel[(t, h)](
        flat_k, flat_v, dst, k, v, flat_k.stride(0), flat_k.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), d, BLOCK_D=triton.next_power_of_2(d), num_warps=1 if d <= 128 else 2,
    )
