"""A query's own tokens (its tail), attended and merged with the page partial, in one call.

After the page kernel has attended the selected document pages, every global layer
of a query forward still has to attend the query's private tokens (causally) and
merge the two partials by log-sum-exp. In plain PyTorch that is ~40 small kernels
per layer (upcasts, two matmuls, mask, logsumexp, exp, the merge's where/exp/log),
~1300 per Llama-3-8B forward, which a CUDA-graph replay still pays one by one.
:func:`attend_tail_merged` does it in one Triton kernel on CUDA.

Layout (the static query path's, serving/static_query.py): the tail is a buffer of
C slots ``tail_k/tail_v (C, Hkv, D)``; query token i sits in slot ``q_slots[i]`` and
sees slots ``0..q_slots[i]`` (its own included, so no row is ever empty).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .merge import merge_attention
from .positional import masked_attention_with_mask

__all__ = ["attend_tail_merged", "attend_tail_merged_reference"]


def _validate(q, tail_k, tail_v, q_slots, o_pages, lse_pages) -> None:
    if q.dim() != 3 or tail_k.dim() != 3 or tail_k.shape != tail_v.shape:
        raise ValueError(
            f"attend_tail_merged: q must be (Tq, Hq, D) and tail_k/tail_v (C, Hkv, D) alike; got q {tuple(q.shape)}, "
            f"tail_k {tuple(tail_k.shape)}, tail_v {tuple(tail_v.shape)}"
        )
    tq, hq, d = q.shape
    if tail_k.shape[2] != d or hq % tail_k.shape[1]:
        raise ValueError(f"attend_tail_merged: tail heads/dim {tuple(tail_k.shape[1:])} do not fit q {tuple(q.shape)}")
    if q_slots.shape != (tq,) or q_slots.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"attend_tail_merged: q_slots must be ({tq},) int32/int64, got {tuple(q_slots.shape)} "
                         f"{q_slots.dtype}")
    if o_pages.shape != q.shape or lse_pages.shape != (tq, hq):
        raise ValueError(f"attend_tail_merged: page partial must be out {tuple(q.shape)} and lse {(tq, hq)}, got "
                         f"{tuple(o_pages.shape)} and {tuple(lse_pages.shape)}")
    if tail_k.dtype != q.dtype or tail_v.dtype != q.dtype:
        raise ValueError(f"attend_tail_merged: tail dtype {tail_k.dtype} must equal q dtype {q.dtype}")
    for name, t in (("tail_k", tail_k), ("tail_v", tail_v), ("q_slots", q_slots), ("o_pages", o_pages),
                    ("lse_pages", lse_pages)):
        if t.device != q.device:
            raise ValueError(f"attend_tail_merged: {name} is on {t.device} but q is on {q.device}")


def attend_tail_merged_reference(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap=None) -> Tensor:
    """Plain PyTorch: masked fp32 attention over the tail, then the exact LSE merge."""
    mask = torch.arange(tail_k.shape[0], device=q.device).unsqueeze(0) <= q_slots.unsqueeze(1)
    o_tail, l_tail = masked_attention_with_mask(q, tail_k, tail_v, mask, scale, softcap)
    out, _ = merge_attention(o_pages, lse_pages, o_tail, l_tail)
    return out.to(q.dtype)


def attend_tail_merged(q: Tensor, tail_k: Tensor, tail_v: Tensor, q_slots: Tensor, o_pages: Tensor,
                       lse_pages: Tensor, scale: float, softcap: float | None = None, impl: str = "auto",
                       check: bool = True) -> Tensor:
    """Merged attention output (Tq, Hq, D) in q.dtype; impl "auto" (Triton on CUDA), "torch" or "triton".

    check=False skips the shape checks (hot paths that built the inputs themselves).
    Slot values are not checked on the device (that would synchronise); slots past C are a
    caller bug the kernel does not read beyond (its loads are bounded by C).
    """
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"attend_tail_merged: impl must be auto, torch or triton, got {impl!r}")
    if check:
        _validate(q, tail_k, tail_v, q_slots, o_pages, lse_pages)
    if impl == "torch" or (impl == "auto" and q.device.type != "cuda"):
        return attend_tail_merged_reference(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap)
    from .triton_tail import triton_tail_merged  # lazy: triton is optional

    return triton_tail_merged(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap)
