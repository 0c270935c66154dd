"""Rotary position embedding of an attention layer's q and k, as one kernel per call.

transformers' ``apply_rotary_pos_emb(q, k, cos, sin)`` runs about ten small kernels per
layer (rotate_half's slices, neg and cat, four muls and two adds, for q and for k). A
query forward of a small decoder replayed as a CUDA graph is launch-bound, so
:func:`apply_rope` does the whole call, q and k together, in one Triton kernel.

Shapes (transformers' convention, ``unsqueeze_dim=1``):

* q ``(B, Hq, T, D)``, k ``(B, Hkv, T, D)``: usually transposed views of ``(B, T, H, D)``
  projections, so B/H/T may have any strides; D must have unit stride (else copied).
* cos, sin ``(B, T, D)`` or ``(1, T, D)`` (broadcast over the batch), D even.

``out = x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x[D/2:], x[:D/2])``.
:func:`apply_rope_reference` is the plain-PyTorch ground truth in transformers' op order,
so on one device it equals transformers' function bit for bit. In half precision that
order rounds three times (two products and the sum); the kernel computes in fp32 and
rounds once, so it is at least as close to the exact result
(tests/kernels/_rope_cases.py states the tolerances).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rope", "apply_rope_reference", "rope_inputs_problem"]


def rope_inputs_problem(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> str | None:
    """Why :func:`apply_rope` would refuse these inputs, or None. Host-side checks only (no sync)."""
    if q.dim() != 4 or k.dim() != 4:
        return f"q and k must be (B, H, T, D); got q {tuple(q.shape)}, k {tuple(k.shape)}"
    b, _, t, d = q.shape
    if k.shape[0] != b or k.shape[2:] != q.shape[2:]:
        return f"q and k must agree on B, T and D; got q {tuple(q.shape)}, k {tuple(k.shape)}"
    if d % 2:
        return f"head dim D must be even, got {d}"
    if cos.shape != sin.shape or cos.dim() != 3 or cos.shape[0] not in (1, b) or cos.shape[1:] != (t, d):
        return (f"cos and sin must be (B, T, D) or (1, T, D) with q's B={b}, T={t}, D={d}; "
                f"got cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    if not (q.dtype == k.dtype == cos.dtype == sin.dtype) or not q.is_floating_point():
        return f"q, k, cos and sin must share one floating dtype; got {q.dtype}, {k.dtype}, {cos.dtype}, {sin.dtype}"
    if not (q.device == k.device == cos.device == sin.device):
        return f"q, k, cos and sin must be on one device; got {q.device}, {k.device}, {cos.device}, {sin.device}"
    return None


def _validate(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    problem = rope_inputs_problem(q, k, cos, sin)
    if problem is not None:
        raise ValueError(f"apply_rope: {problem}")


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope_reference(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Plain PyTorch, in transformers' op order. Returns (q_out, k_out) shaped like q and k."""
    _validate(q, k, cos, sin)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def apply_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, impl: str = "auto") -> tuple[Tensor, Tensor]:
    """RoPE of q and k. impl: "auto" (Triton on CUDA, else torch), "torch", "triton".

    Returns new tensors (q_out, k_out) in q's dtype with q's and k's shapes; the Triton path
    gives them q's and k's memory layout, as transformers' elementwise ops do.
    """
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"apply_rope: impl must be auto, torch or triton, got {impl!r}")
    if impl == "torch" or (impl == "auto" and q.device.type != "cuda"):
        return apply_rope_reference(q, k, cos, sin)
    _validate(q, k, cos, sin)
    from .triton_rope import triton_rope  # lazy: triton is optional

    return triton_rope(q, k, cos, sin)
