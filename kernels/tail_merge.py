"""Attention over a query's slot buffers, one kernel per layer on CUDA.

* Global layers: the query's own tokens (its tail), attended and merged with the page
  partial (:func:`attend_tail_merged`).
* Sliding-window layers: the document's last W tokens followed by the tail, in one buffer,
  each query token seeing the W entries ending at its own (:func:`attend_window`). Through
  SDPA with a boolean mask this was cuDNN's masked attention at ~130 us per call on an
  H200, ~2 ms of a 3.8 ms Gemma 3 270M decode replay (docs/KERNELS.md).

After the page kernel has attended the selected document pages, every global layer
of a query forward still has to attend the query's private tokens (causally) and
merge the two partials by log-sum-exp. In plain PyTorch that is ~40 small kernels
per layer (upcasts, two matmuls, mask, logsumexp, exp, the merge's where/exp/log),
~1300 per Llama-3-8B forward, which a CUDA-graph replay still pays one by one.
:func:`attend_tail_merged` does it in one Triton kernel on CUDA.

Layout (the static query path's, serving/runner/static_query.py): the tail is a buffer of
C slots ``tail_k/tail_v (C, Hkv, D)``; query token i sits in slot ``q_slots[i]`` and
sees slots ``0..q_slots[i]`` (its own included, so no row is ever empty). With ``q_base``
(the batched decode rows of serving/runner/batch_slots.py: R rows' buffers as one flat
buffer) token i sees only ``q_base[i]..q_slots[i]``: its own row's part.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from .merge import merge_attention
from .positional import masked_attention_with_mask, window_attention
from .tail_tiles import block_m_for

__all__ = ["attend_tail_merged", "attend_tail_merged_reference", "attend_window", "attend_window_reference",
           "first_call_results"]

log = logging.getLogger(__name__)
# Relative error of the kernel vs the torch path that its first call per launch signature
# must meet (both compute in fp32; half precision adds the output rounding).
_FIRST_CALL_TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# Launch signature -> True (kernel agreed on its first call) / False (use the torch path).
_checked: dict[tuple, bool] = {}


def _kernel_or_reference(signature: tuple, kernel, reference, dtype: torch.dtype) -> Tensor:
    """Run the Triton kernel, checking its first call per signature against the torch path.

    The kernels are held to the torch path by the test grids (Triton's interpreter on CPU, the
    compiled kernel on a GPU); this check guards a GPU, Triton version or shape those grids
    did not cover. On a mismatch or a compile error the signature falls back to the torch path
    for the life of the process, with a warning. It runs eagerly: the static query path
    executes every forward once before capturing it as a CUDA graph.
    """
    state = _checked.get(signature)
    if state is True:
        return kernel()
    if state is False:
        return reference()
    want = reference()
    try:
        got = kernel()
        err = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()
        ok = bool(torch.isfinite(got).all()) and err <= _FIRST_CALL_TOL.get(dtype, 1e-4)
        why = f"relative error {err:.2e} vs the torch path"
    except Exception as exc:  # noqa: BLE001 - any failure: stay correct on the torch path
        ok, why = False, f"{type(exc).__name__}: {exc}"
    _checked[signature] = ok
    if not ok:
        log.warning("Triton slot-attention kernel %s failed its first-call check (%s); using the torch path",
                    signature, why)
    return want


def first_call_results() -> dict[str, str]:
    """What the first-call checks decided so far, for operators: "<kernel> <dtype> <heads>x<dim>
    m<tile>[ s<splits>]" -> "triton" (kernel in use) or "torch fallback" (mismatch or compile
    error, logged)."""
    out = {}
    for sig, ok in _checked.items():
        if len(sig) in (9, 10):  # (kind, device, dtype, Hq, Hkv, D, softcap, block_m, splits[, per-token])
            kind, _, dtype, hq, hkv, d, _, bm, splits = sig[:9]
            name = f"{kind} {str(dtype).replace('torch.', '')} {hq}/{hkv}x{d} m{bm}" + (f" s{splits}" if splits > 1
                                                                                      else "")
            out[name + (" per-token" if len(sig) == 10 else "")] = "triton" if ok else "torch fallback"
    return out


def _signature(kind: str, q: Tensor, k: Tensor, softcap, window: int | None = None, per_token: bool = False
               ) -> tuple:
    """What selects a distinct compiled kernel: the first-call check runs once per value."""
    group = q.shape[1] // k.shape[1]
    rows = group if per_token else q.shape[0] * group
    splits = _triton().launch_splits(q, k, window, per_token) if window else 1
    sig = (kind, str(q.device), q.dtype, q.shape[1], k.shape[1], q.shape[2], bool(softcap), block_m_for(rows, kind),
           splits)
    return sig + ("per-token",) if per_token else sig


def _validate(fn: str, q, k, v, q_slots, o_pages=None, lse_pages=None, q_base=None) -> None:
    """Shape, dtype and device checks shared by both calls; the page partial only for the tail."""
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape:
        raise ValueError(
            f"{fn}: q must be (Tq, Hq, D) and the key/value buffers (C, Hkv, D) alike; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    tq, hq, d = q.shape
    if k.shape[2] != d or hq % k.shape[1]:
        raise ValueError(f"{fn}: buffer heads/dim {tuple(k.shape[1:])} do not fit q {tuple(q.shape)}")
    if q_slots.shape != (tq,) or q_slots.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{fn}: q_slots must be ({tq},) int32/int64, got {tuple(q_slots.shape)} {q_slots.dtype}")
    if q_base is not None and (q_base.shape != (tq,) or q_base.dtype not in (torch.int32, torch.int64)
                               or q_base.device != q.device):
        raise ValueError(f"{fn}: q_base must be ({tq},) int32/int64 on {q.device}, got {tuple(q_base.shape)} "
                         f"{q_base.dtype} on {q_base.device}")
    if o_pages is not None and (o_pages.shape != q.shape or lse_pages.shape != (tq, hq)):
        raise ValueError(f"{fn}: page partial must be out {tuple(q.shape)} and lse {(tq, hq)}, got "
                         f"{tuple(o_pages.shape)} and {tuple(lse_pages.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{fn}: buffer dtype {k.dtype} must equal q dtype {q.dtype}")
    for name, t in (("k", k), ("v", v), ("q_slots", q_slots), ("o_pages", o_pages), ("lse_pages", lse_pages)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{fn}: {name} is on {t.device} but q is on {q.device}")


def _visible_from(q_base, n: int, device) -> Tensor | None:
    """(Tq, n) entries at or after each token's lower bound, or None without one."""
    if q_base is None:
        return None
    return torch.arange(n, device=device).unsqueeze(0) >= q_base.unsqueeze(1)


def attend_tail_merged_reference(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap=None,
                                 q_base=None) -> Tensor:
    """Plain PyTorch: masked fp32 attention over the tail, then the exact LSE merge."""
    mask = torch.arange(tail_k.shape[0], device=q.device).unsqueeze(0) <= q_slots.unsqueeze(1)
    low = _visible_from(q_base, tail_k.shape[0], q.device)
    if low is not None:
        mask &= low
    o_tail, l_tail = masked_attention_with_mask(q, tail_k, tail_v, mask, scale, softcap)
    out, _ = merge_attention(o_pages, lse_pages, o_tail, l_tail)
    return out.to(q.dtype)


def attend_tail_merged(q: Tensor, tail_k: Tensor, tail_v: Tensor, q_slots: Tensor, o_pages: Tensor,
                       lse_pages: Tensor, scale: float, softcap: float | None = None, impl: str = "auto",
                       check: bool = True, q_base: Tensor | None = None) -> Tensor:
    """Merged attention output (Tq, Hq, D) in q.dtype; impl "auto" (Triton on CUDA), "torch" or "triton".

    check=False skips the shape checks (hot paths that built the inputs themselves).
    Slot values are not checked on the device (that would synchronise); slots past C are a
    caller bug the kernel does not read beyond (its loads are bounded by C). ``q_base``: see
    the module docstring (each token's first visible slot).
    """
    if check:
        _validate("attend_tail_merged", q, tail_k, tail_v, q_slots, o_pages, lse_pages, q_base)
    return _dispatch(
        "tail_merged", impl, q, tail_k, softcap, None,
        lambda: _triton().triton_tail_merged(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap, q_base),
        lambda: attend_tail_merged_reference(q, tail_k, tail_v, q_slots, o_pages, lse_pages, scale, softcap, q_base),
        q_base is not None,
    )


def attend_window_reference(q, k, v, q_slots, offset, window, scale, softcap=None, q_base=None) -> Tensor:
    """Band-masked attention through SDPA (the path the kernel replaces)."""
    idx = torch.arange(k.shape[0], device=q.device).unsqueeze(0)
    hi = (q_slots + offset).unsqueeze(1)
    mask = (idx <= hi) & (idx > hi - window)
    low = _visible_from(q_base, k.shape[0], q.device)
    return window_attention(q, k, v, mask if low is None else mask & low, scale, softcap)


def attend_window(q: Tensor, k: Tensor, v: Tensor, q_slots: Tensor, offset: int, window: int, scale: float,
                  softcap: float | None = None, impl: str = "auto", check: bool = True,
                  q_base: Tensor | None = None) -> Tensor:
    """Sliding-window attention over a slot buffer: (Tq, Hq, D) in q.dtype.

    k, v (C, Hkv, D); query token i sits at buffer entry ``offset + q_slots[i]`` and sees the
    ``window`` entries ending there (fewer at the buffer's start, or at ``q_base[i]`` when
    given). Entries must be in position order with no gaps, as the static query path keeps
    them (document window, then tail).
    """
    if check:
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"attend_window: window must be an int >= 1, got {window!r}")
        if not isinstance(offset, int) or not 0 <= offset <= k.shape[0]:
            raise ValueError(f"attend_window: offset must be an int in [0, {k.shape[0]}], got {offset!r}")
        _validate("attend_window", q, k, v, q_slots, q_base=q_base)
    return _dispatch(
        "window", impl, q, k, softcap, window,
        lambda: _triton().triton_window(q, k, v, q_slots, offset, window, scale, softcap, q_base=q_base),
        lambda: attend_window_reference(q, k, v, q_slots, offset, window, scale, softcap, q_base),
        q_base is not None,
    )


def _triton():
    from . import triton_tail  # lazy: triton is optional

    return triton_tail


def _dispatch(kind: str, impl: str, q: Tensor, k: Tensor, softcap, window, kernel, reference,
              per_token: bool = False) -> Tensor:
    """The torch path ("torch", or "auto" off CUDA) or the checked Triton kernel."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"attend_{kind}: impl must be auto, torch or triton, got {impl!r}")
    if impl == "torch" or (impl == "auto" and q.device.type != "cuda"):
        return reference()
    return _kernel_or_reference(_signature(kind, q, k, softcap, window, per_token), kernel, reference, q.dtype)
