"""Selected-page attention through flash-attn's paged-KV decode kernel.

``flash_attn.flash_attn_with_kvcache`` accepts a paged cache with the same
(S, P, Hkv, D) layout as ours plus a ``block_table``, but it treats a row as
one contiguous sequence of ``cache_seqlens[b]`` tokens laid over its pages.
It therefore only fits our inputs when:

* flash-attn is importable, tensors are CUDA fp16/bf16, D <= 256, D % 8 == 0;
* the page size P is a multiple of 256 (flash-attn's paged-KV requirement);
* in every row all selected pages except the last are full
  (``slot_lens == P``): only the last block of a row may be ragged.

Anything else raises :class:`NotImplementedError` so that
:func:`kernels.attend_selected` (``impl="auto"``) falls back to Triton.
Checking the ragged-page rule reads a flag back to the host, i.e. one
device sync per call.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["flash_available", "flash_static_fit", "flash_attend_selected"]


@functools.lru_cache(maxsize=1)
def flash_available() -> bool:
    """True when ``flash_attn.flash_attn_with_kvcache`` can be imported (cached: a failing import is slow)."""
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA extension
        return False
    return True


def flash_static_fit(q: Tensor, k_pages: Tensor) -> str | None:
    """Return why flash-attn cannot serve these shapes/dtypes, or None if it can (shape-level only)."""
    if not flash_available():
        return "flash_attn is not installed"
    if q.device.type != "cuda":
        return "flash-attn needs CUDA tensors"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"flash-attn supports fp16/bf16, got {q.dtype}"
    D = q.shape[-1]
    if D > 256 or D % 8 != 0:
        return f"flash-attn needs head dim <= 256 and a multiple of 8, got {D}"
    P = k_pages.shape[1]
    if P % 256 != 0:
        return f"flash-attn paged KV needs page size % 256 == 0, got {P}"
    return None


def flash_attend_selected(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_table: Tensor,
    num_blocks: Tensor,
    slot_lens: Tensor,
    scale: float,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~agentctx.kernels.attend_selected.attend_selected` through flash-attn's paged kernel.

    Raises NotImplementedError when the inputs do not fit its layout (module docstring).
    """
    why = flash_static_fit(q, k_pages)
    if why is not None:
        raise NotImplementedError(f"flash path unusable: {why}")
    if torch.cuda.is_current_stream_capturing():
        # The ragged-page check below reads a flag on the host, which a CUDA
        # graph capture forbids; let the dispatcher use Triton instead.
        raise NotImplementedError("flash path unusable: its layout check cannot run inside CUDA graph capture")
    from flash_attn import flash_attn_with_kvcache

    B, Tq, Hq, D = q.shape
    P = k_pages.shape[1]
    M = block_table.shape[1]
    nb = num_blocks.long()
    col = torch.arange(M, device=q.device)[None, :]
    used = col < nb[:, None]  # (B, M) entries that are really selected
    # Padding may hold -1 or any garbage; flash-attn must never see it.
    bt = torch.where(used, block_table, torch.zeros_like(block_table)).to(torch.int32).contiguous()
    lens = slot_lens.long()[bt.long()]  # (B, M), garbage where ~used
    is_last = col == (nb[:, None] - 1)
    ragged_inner = used & ~is_last & (lens != P)
    if bool(ragged_inner.any()):  # host sync
        raise NotImplementedError(
            "flash path unusable: a non-last selected page of some row is not full (slot_lens < P)"
        )
    last_len = torch.where(used & is_last, lens, torch.zeros_like(lens)).sum(dim=1)
    seqlens = (torch.clamp(nb - 1, min=0) * P + last_len).to(torch.int32)

    out, lse = flash_attn_with_kvcache(
        q,
        k_pages,
        v_pages,
        cache_seqlens=seqlens,
        block_table=bt,
        softmax_scale=float(scale),
        causal=False,  # pages strictly precede the queries
        softcap=float(softcap) if softcap else 0.0,
        return_softmax_lse=True,
    )
    lse = lse.float().transpose(1, 2)  # (B, Hq, Tq) -> (B, Tq, Hq)
    # flash-attn reports empty rows as lse = +inf; our contract is out 0, lse -inf.
    empty = (seqlens == 0)[:, None, None]
    lse = torch.where(empty, torch.full_like(lse, float("-inf")), lse).contiguous()
    out = torch.where(empty[..., None], torch.zeros_like(out), out)
    return out, lse
