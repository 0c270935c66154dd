"""Decode rows of one document attending the union of their plans: each page read once per step.

Every agent of a context reads the same document, each through its own plan. Attention row by
row (:func:`kernels.attend_selected` with one block table per row) reads a page once for every
row that selected it: 16 dense rows read a 1M-token Gemma 3 KV 16 times per step. Here the
step's rows share one table, the **union** of their plans, and a bit per row says who selected
each union page; the kernel loads each union page's K/V once and computes it for all the rows
of its tile, a row that did not select the page masked to -inf. So selected attention never
reads more than dense attention read once ("cascade" attention over a shared prefix), and
reads less by the document's size over the union's.

Inputs (one layer):

* ``q`` (R, Hq, D): one query token per row (R <= 64);
* ``union`` (U,) int32 page slots, the first ``union_len[0]`` valid (a device scalar, so a
  CUDA graph replays whatever the union's size); ``row_bits`` (U,) int64: bit r set when row r
  selected union page u;
* ``k_pages``/``v_pages`` (S, P, Hkv, D) in q's dtype, or quantised pools
  (:class:`~agentctx.kernels.kv_quant.QuantPages`: fp8 e4m3 / int8 values with float32 scales
  at any granularity, K and V independently), ``slot_lens`` (S,) int32 valid tokens per page.

Returns ``(out (R, Hq, D) in q.dtype, lse (R, Hq) float32)``: for each row, attention over the
valid tokens of the pages it selected (no causal mask), as :func:`attend_selected` gives it; a
row that selected nothing gets out 0 and lse -inf. The Triton kernel is
``kernels/triton_union.py``; :func:`attend_union_reference` is the plain-PyTorch truth (quantised
pools: the union's pages dequantised to float32, then the float reference).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .kv_quant import QMAX, QuantPages, dequantize_pages
from .reference import attend_selected_reference

__all__ = ["attend_union", "attend_union_reference", "union_tables", "MAX_ROWS"]

MAX_ROWS = 64  # rows per union: one int64 of bits per page


def union_tables(plans: list[tuple[int, ...] | None], num_pages: int) -> tuple[list[int], list[int]]:
    """(union, row_bits) of the plans (row r's page tuple, None: no pages): sorted union pages
    and, per union page, the int bit set of the rows that selected it. Host lists."""
    if len(plans) > MAX_ROWS:
        raise ValueError(f"union_tables: at most {MAX_ROWS} rows, got {len(plans)}")
    bits: dict[int, int] = {}
    for r, pages in enumerate(plans):
        for p in pages or ():
            if not 0 <= p < num_pages:
                raise ValueError(f"union_tables: page {p} out of range for {num_pages} pages")
            bits[p] = bits.get(p, 0) | (1 << r)
    union = sorted(bits)
    return union, [_signed64(bits[p]) for p in union]


def _signed64(x: int) -> int:
    """An unsigned 64-bit pattern as the int64 torch stores (bit 63 is the sign)."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _values(pages: Tensor | QuantPages, name: str) -> Tensor:
    """A pool's value tensor, its dtype checked against what the kernels read."""
    if isinstance(pages, QuantPages):
        pages.check(f"attend_union: {name}")
        return pages.data
    if not isinstance(pages, Tensor):
        raise ValueError(f"attend_union: {name} must be a Tensor or QuantPages, got {type(pages).__name__}")
    return pages


def _validate(q, k_pages, v_pages, union, union_len, row_bits, slot_lens) -> None:
    if q.dim() != 3:
        raise ValueError(f"attend_union: q must be (R, Hq, D), got {tuple(q.shape)}")
    quant = {name: isinstance(x, QuantPages) for name, x in (("k_pages", k_pages), ("v_pages", v_pages))}
    k_pages, v_pages = _values(k_pages, "k_pages"), _values(v_pages, "v_pages")
    if k_pages.dim() != 4 or v_pages.shape != k_pages.shape:
        raise ValueError(f"attend_union: k_pages/v_pages must be (S, P, Hkv, D) alike, got {tuple(k_pages.shape)} "
                         f"and {tuple(v_pages.shape)}")
    r, hq, d = q.shape
    s, _, hkv, dk = k_pages.shape
    if dk != d or hq % hkv:
        raise ValueError(f"attend_union: pages {tuple(k_pages.shape)} do not fit q {tuple(q.shape)}")
    if r > MAX_ROWS:
        raise ValueError(f"attend_union: at most {MAX_ROWS} rows, got {r}")
    if union.dim() != 1 or union.dtype != torch.int32 or row_bits.shape != union.shape or row_bits.dtype != torch.int64:
        raise ValueError("attend_union: union must be (U,) int32 and row_bits (U,) int64")
    if union_len.shape != (1,) or union_len.dtype != torch.int32:
        raise ValueError("attend_union: union_len must be a (1,) int32 tensor")
    if slot_lens.shape != (s,) or slot_lens.dtype != torch.int32:
        raise ValueError(f"attend_union: slot_lens must be ({s},) int32")
    for name, t in (("k_pages", k_pages), ("v_pages", v_pages)):
        if quant[name] and t.dtype not in QMAX:
            raise ValueError(f"attend_union: quantised {name} must be float8_e4m3fn or int8, got {t.dtype}")
        if not quant[name] and t.dtype != q.dtype:
            raise ValueError(f"attend_union: page dtype {t.dtype} must equal q dtype {q.dtype}")
    for name, t in (("k_pages", k_pages), ("v_pages", v_pages), ("union", union), ("union_len", union_len),
                    ("row_bits", row_bits), ("slot_lens", slot_lens)):
        if t.device != q.device:
            raise ValueError(f"attend_union: {name} is on {t.device} but q is on {q.device}")
    for name, t in (("q", q), ("k_pages", k_pages), ("v_pages", v_pages)):
        if t.numel() and t.stride(-1) != 1:
            raise ValueError(f"attend_union: {name} needs unit stride on the head dim")


def _dequantized_union(k_pages: QuantPages | Tensor, v_pages: QuantPages | Tensor, union: Tensor, n: int,
                       slot_lens: Tensor):
    """Only the union's pages, float32 (a quantised pool) and renumbered 0..n-1: the reference never
    dequantises pages no row reads."""
    idx = union[:n].long()

    def part(pages):
        if isinstance(pages, QuantPages):
            return dequantize_pages(pages.data[idx], pages.scale[idx], torch.float32)
        return pages[idx]

    return part(k_pages), part(v_pages), torch.arange(n, dtype=torch.int32, device=union.device), slot_lens[idx]


def attend_union_reference(q: Tensor, k_pages: Tensor | QuantPages, v_pages: Tensor | QuantPages, union: Tensor,
                           union_len: Tensor, row_bits: Tensor, slot_lens: Tensor, scale: float,
                           softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """Each row's own block table from the bits, through the plain-PyTorch page attention
    (quantised pools: the union's pages dequantised to float32 first)."""
    n = int(union_len[0])
    if isinstance(k_pages, QuantPages) or isinstance(v_pages, QuantPages):
        k_pages, v_pages, union, slot_lens = _dequantized_union(k_pages, v_pages, union, n, slot_lens)
    pages = union[:n].tolist()
    bits = row_bits[:n].tolist()
    r = q.shape[0]
    tables = [[p for p, b in zip(pages, bits) if (b >> i) & 1] for i in range(r)]
    width = max(1, max(map(len, tables)))
    bt = torch.zeros(r, width, dtype=torch.int32, device=q.device)
    for i, t in enumerate(tables):
        if t:
            bt[i, : len(t)] = torch.tensor(t, dtype=torch.int32)
    nb = torch.tensor([len(t) for t in tables], dtype=torch.int32, device=q.device)
    out, lse = attend_selected_reference(q.unsqueeze(1), k_pages, v_pages, bt, nb, slot_lens, float(scale),
                                         float(softcap) if softcap else None)
    return out[:, 0], lse[:, 0]


@functools.lru_cache(maxsize=1)
def _triton():
    try:
        from . import triton_union
    except ImportError:
        return None
    return triton_union


def attend_union(q: Tensor, k_pages: Tensor | QuantPages, v_pages: Tensor | QuantPages, union: Tensor,
                 union_len: Tensor, row_bits: Tensor, slot_lens: Tensor, scale: float, softcap: float | None = None,
                 impl: str = "auto", num_splits: int | None = None, check: bool = True) -> tuple[Tensor, Tensor]:
    """See the module docstring. impl: "auto" (Triton on CUDA, else torch), "torch", "triton"
    (CUDA, or CPU tensors under TRITON_INTERPRET=1). ``num_splits``: programs along the union
    (None: enough to fill the GPU for the union's largest size, ``union.numel()``)."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"attend_union: impl must be auto, torch or triton, got {impl!r}")
    if check:
        _validate(q, k_pages, v_pages, union, union_len, row_bits, slot_lens)
    if impl == "torch" or (impl == "auto" and q.device.type != "cuda"):
        return attend_union_reference(q, k_pages, v_pages, union, union_len, row_bits, slot_lens, scale, softcap)
    tri = _triton()
    if tri is None:
        if impl == "triton":
            raise RuntimeError("attend_union(impl='triton'): Triton is unavailable")
        return attend_union_reference(q, k_pages, v_pages, union, union_len, row_bits, slot_lens, scale, softcap)
    return tri.triton_attend_union(q, k_pages, v_pages, union, union_len, row_bits, slot_lens, scale, softcap,
                                   num_splits)
