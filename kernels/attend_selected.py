"""Public launcher: attention of query tokens over selected pages of a shared KV pool.

This module only validates inputs and picks an implementation:

* ``"torch"``  – :func:`kernels.reference.attend_selected_reference` (any device).
* ``"triton"`` – :mod:`kernels.triton_attend` (CUDA; or CPU tensors when
  Triton's interpreter is active via ``TRITON_INTERPRET=1``).
* ``"flash"``  – :mod:`kernels.flash_attend` (flash-attn paged KV; raises
  ``NotImplementedError`` when the layout does not fit).
* ``"auto"``   – flash if it fits, else Triton on CUDA, else torch.

:func:`attend_selected_quant` is the same attention over fp8/int8 pages with scales
(:mod:`kernels.kv_quant`): ``"reference"`` (dequantise, then the float32 reference), ``"triton"``
(:mod:`kernels.triton_attend_quant`, dequantising in registers) or ``"auto"``. ``attend_selected``
given :class:`~agentctx.kernels.kv_quant.QuantPages` pools calls it, so a caller holding either
kind of pool (the engine's document KV) makes one call.

Triton and flash-attn are imported lazily, so ``import kernels`` works on a
machine with neither.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from .kv_quant import QuantPages
from .reference import attend_selected_quant_reference, attend_selected_reference

__all__ = ["attend_selected", "attend_selected_quant", "IMPLS", "QUANT_IMPLS"]

IMPLS = ("auto", "torch", "triton", "flash")
QUANT_IMPLS = ("auto", "reference", "torch", "triton")  # "torch" = "reference", as in attend_selected
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _shape(t: Tensor) -> str:
    return str(tuple(t.shape))


def _validate(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale, softcap, impl,
              kv_dtypes: tuple | None = None, impls: tuple = IMPLS) -> None:
    """Raise ValueError with a precise message for anything the kernels cannot take.

    kv_dtypes: None for float pages of q's dtype, else the dtypes quantised pages may have."""
    if impl not in impls:
        raise ValueError(f"attend_selected: impl must be one of {impls}, got {impl!r}")
    names = ("q", "k_pages", "v_pages", "block_table", "num_blocks", "slot_lens")
    for name, t in zip(names, (q, k_pages, v_pages, block_table, num_blocks, slot_lens)):
        if not isinstance(t, Tensor):
            raise ValueError(f"attend_selected: {name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4:
        raise ValueError(f"attend_selected: q must be (B, Tq, Hq, D), got shape {_shape(q)}")
    if k_pages.dim() != 4:
        raise ValueError(f"attend_selected: k_pages must be (S, P, Hkv, D), got shape {_shape(k_pages)}")
    if v_pages.shape != k_pages.shape:
        raise ValueError(f"attend_selected: v_pages shape {_shape(v_pages)} != k_pages shape {_shape(k_pages)}")
    B, Tq, Hq, D = q.shape
    S, P, Hkv, Dk = k_pages.shape
    if Dk != D:
        raise ValueError(f"attend_selected: head dim of q ({D}) != head dim of k_pages ({Dk})")
    if Hq == 0 or Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"attend_selected: Hq ({Hq}) must be a multiple of Hkv ({Hkv})")
    if P == 0 or D == 0:
        raise ValueError(f"attend_selected: page size and head dim must be > 0, got P={P}, D={D}")
    if q.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"attend_selected: q dtype must be float32/float16/bfloat16, got {q.dtype}")
    if kv_dtypes is not None:
        if k_pages.dtype not in kv_dtypes or v_pages.dtype not in kv_dtypes:
            raise ValueError(f"attend_selected: quantised k/v dtypes must be in {kv_dtypes}, "
                             f"got {k_pages.dtype}/{v_pages.dtype}")
    elif k_pages.dtype != q.dtype or v_pages.dtype != q.dtype:
        raise ValueError(
            f"attend_selected: k_pages/v_pages dtype ({k_pages.dtype}/{v_pages.dtype}) must equal q dtype ({q.dtype})"
        )
    if block_table.dim() != 2 or block_table.shape[0] != B:
        raise ValueError(f"attend_selected: block_table must be (B={B}, M), got shape {_shape(block_table)}")
    if num_blocks.shape != (B,):
        raise ValueError(f"attend_selected: num_blocks must be (B={B},), got shape {_shape(num_blocks)}")
    if slot_lens.shape != (S,):
        raise ValueError(f"attend_selected: slot_lens must be (S={S},), got shape {_shape(slot_lens)}")
    for name, t in (("block_table", block_table), ("num_blocks", num_blocks), ("slot_lens", slot_lens)):
        if t.dtype != torch.int32:
            raise ValueError(f"attend_selected: {name} must be int32, got {t.dtype}")
    dev = q.device
    for name, t in zip(names[1:], (k_pages, v_pages, block_table, num_blocks, slot_lens)):
        if t.device != dev:
            raise ValueError(
                f"attend_selected: {name} is on {t.device} but q is on {dev}; all inputs must share a device")
    # The kernels read D-vectors with unit stride (coalesced loads); other dims may be strided.
    for name, t in (("q", q), ("k_pages", k_pages), ("v_pages", v_pages)):
        if t.numel() > 0 and t.stride(-1) != 1:
            raise ValueError(
                f"attend_selected: {name} must have unit stride in the last (head-dim) axis, got strides {t.stride()}; "
                "call .contiguous() first"
            )
    if not isinstance(scale, (int, float)) or not math.isfinite(float(scale)):
        raise ValueError(f"attend_selected: scale must be a finite float, got {scale!r}")
    if softcap is not None and (not isinstance(softcap, (int, float)) or not (float(softcap) >= 0.0)
                                or not math.isfinite(float(softcap))):
        raise ValueError(f"attend_selected: softcap must be None or a finite float >= 0 (0 = off), got {softcap!r}")
    # Value checks need the data on the host; only done where that is free (CPU)
    # so that GPU calls never synchronise here.
    if dev.type == "cpu":
        M = block_table.shape[1]
        if B and (int(num_blocks.min()) < 0 or int(num_blocks.max()) > M):
            raise ValueError(f"attend_selected: num_blocks values must lie in [0, M={M}], got {num_blocks.tolist()}")
        if S and (int(slot_lens.min()) < 0 or int(slot_lens.max()) > P):
            raise ValueError(f"attend_selected: slot_lens values must lie in [0, P={P}]")
        used = torch.arange(M)[None, :] < num_blocks.long()[:, None]
        sel = block_table[used]
        if sel.numel() and (int(sel.min()) < 0 or int(sel.max()) >= S):
            raise ValueError(f"attend_selected: selected block_table entries must be slot ids in [0, S={S})")


@functools.lru_cache(maxsize=1)
def _load_triton():
    """(module, None) or (None, error text); cached because a failing import is slow per call."""
    try:
        from . import triton_attend
    except ImportError as exc:
        return None, str(exc)
    return triton_attend, None


def _triton_impl():
    """Import the Triton launcher, turning a missing package into a clear error."""
    module, err = _load_triton()
    if module is None:
        raise RuntimeError(f"attend_selected(impl='triton'): Triton is unavailable ({err})")
    return module


def _triton_for(q: Tensor, caller: str):
    """The Triton module for tensors like ``q``; RuntimeError when Triton is missing or cannot run
    them (not on CUDA, and not in the interpreter)."""
    tri = _triton_impl()
    if q.device.type != "cuda" and not tri.INTERPRET:
        raise RuntimeError(
            f"{caller}(impl='triton'): tensors are on {q.device}; Triton needs CUDA "
            "(or TRITON_INTERPRET=1 set before kernels.triton_attend is imported)"
        )
    return tri


# attend_selected's impl for quantised pools: flash-attn reads no fp8/int8 pages with our scales,
# so "flash" takes the quantised auto path (Triton on CUDA) rather than failing a running engine.
_QUANT_IMPL_OF = {"auto": "auto", "torch": "reference", "triton": "triton", "flash": "auto"}


def attend_selected(
    q: Tensor,
    k_pages: Tensor | QuantPages,
    v_pages: Tensor | QuantPages,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
    impl: str = "auto",
) -> tuple[Tensor, Tensor]:
    """Attention of each query row over the valid tokens of its selected KV pages.

    Args:
        q: (B, Tq, Hq, D) query tokens, float32/float16/bfloat16.
        k_pages, v_pages: (S, P, Hkv, D) page pool of one layer, same dtype as q.
            Hq % Hkv == 0; query head h reads kv head h // (Hq // Hkv). Quantised pools
            (QuantPages) go to :func:`attend_selected_quant` (impl "torch" -> "reference",
            "flash" -> "auto").
        block_table: (B, M) int32 slot ids; row b uses ``[:num_blocks[b]]``,
            the rest is padding and is never read.
        num_blocks: (B,) int32, 0 <= num_blocks[b] <= M.
        slot_lens: (S,) int32 valid tokens per slot (0..P); later tokens are ignored.
        scale: multiplier on q·k.
        softcap: optional; scores = softcap * tanh(scores / softcap) after scaling.
        impl: "auto" | "torch" | "triton" | "flash".

    Returns:
        out (B, Tq, Hq, D) in ``q.dtype`` and lse (B, Tq, Hq) float32
        (natural log-sum-exp of the scaled, capped scores). There is no causal
        mask: every query sees all valid tokens of its pages. A row with no
        valid token gives out = 0 and lse = -inf.

    Value ranges (slot ids, num_blocks <= M, slot_lens <= P) are checked only
    for CPU tensors: on CUDA that would need a device sync per call, so
    out-of-range values there are undefined behaviour.

    Raises:
        ValueError: bad shapes, dtypes, devices, strides or (CPU only) values.
        NotImplementedError: impl="flash" and the layout does not fit flash-attn.
        RuntimeError: impl="triton" and Triton cannot run these tensors.
    """
    if isinstance(k_pages, QuantPages) or isinstance(v_pages, QuantPages):
        if impl not in _QUANT_IMPL_OF:
            raise ValueError(f"attend_selected: impl must be one of {IMPLS}, got {impl!r}")
        return attend_selected_quant(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale, softcap,
                                     impl=_QUANT_IMPL_OF[impl])
    _validate(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale, softcap, impl)
    softcap = float(softcap) if softcap else None
    scale = float(scale)
    args = (q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale, softcap)

    if impl == "torch":
        return attend_selected_reference(*args)
    if impl == "flash":
        from .flash_attend import flash_attend_selected

        return flash_attend_selected(*args)
    if impl == "triton":
        return _triton_for(q, "attend_selected").triton_attend_selected(*args)

    # impl == "auto"
    if q.device.type == "cuda":
        from .flash_attend import flash_attend_selected, flash_static_fit

        if flash_static_fit(q, k_pages) is None:
            try:
                return flash_attend_selected(*args)
            except NotImplementedError:
                pass  # e.g. a ragged inner page: Triton handles any layout
        try:
            tri = _triton_impl()
        except RuntimeError:
            tri = None
        if tri is not None:
            return tri.triton_attend_selected(*args)
    return attend_selected_reference(*args)


def attend_selected_quant(
    q: Tensor,
    k_pages: QuantPages,
    v_pages: QuantPages,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
    impl: str = "auto",
) -> tuple[Tensor, Tensor]:
    """:func:`attend_selected` over quantised pools: the same contract, with K and V as
    :class:`~agentctx.kernels.kv_quant.QuantPages` ``(data (S, P, Hkv, D) fp8 e4m3 / int8, float32
    scale)`` at any granularity (K and V may differ in dtype and granularity).

    impl: "reference" (or "torch"): dequantise to float32 and run the float32 reference;
    "triton": dequantise in registers (CUDA, or CPU under ``TRITON_INTERPRET=1``); "auto": Triton
    on CUDA when it imports, else the reference. Scales must be finite for every valid token
    (``quantize_pages`` guarantees it); tokens past ``slot_lens`` and their scales are never read.
    """
    if not isinstance(k_pages, QuantPages) or not isinstance(v_pages, QuantPages):
        raise ValueError("attend_selected_quant: k_pages and v_pages must be QuantPages (see kernels.kv_quant)")
    k_pages.check("attend_selected_quant: k_pages")
    v_pages.check("attend_selected_quant: v_pages")
    _validate(q, k_pages.data, v_pages.data, block_table, num_blocks, slot_lens, scale, softcap, impl,
              kv_dtypes=(torch.float8_e4m3fn, torch.int8), impls=QUANT_IMPLS)
    softcap = float(softcap) if softcap else None
    args = (q, k_pages, v_pages, block_table, num_blocks, slot_lens, float(scale), softcap)
    if impl in ("reference", "torch"):
        return attend_selected_quant_reference(*args)
    if impl == "triton" or q.device.type == "cuda":
        try:
            _triton_for(q, "attend_selected_quant")
        except RuntimeError:
            if impl == "triton":
                raise
            return attend_selected_quant_reference(*args)  # auto on CUDA without Triton
        from .triton_attend_quant import triton_attend_selected_quant

        return triton_attend_selected_quant(*args)
    return attend_selected_quant_reference(*args)
