"""Random test cases for the selected-page attention kernels (shared by the test modules).

A case is a page pool (S, P, Hkv, D) holding pages for every row plus unused
"decoy" slots, a block table padded with -1 (or garbage), and slot lengths
with ragged pages. Tokens past a slot's length are filled with NaN so that any
kernel reading them produces NaN and fails the comparison.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from agentctx.kernels import dense_attention_reference

__all__ = ["Case", "make_case", "dense_expected", "TOL", "assert_close_attention"]

# (atol, rtol) for out; lse is float32 everywhere and compared with its own tolerance.
TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-2, 2e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


@dataclass
class Case:
    q: torch.Tensor  # (B, Tq, Hq, D)
    k_pages: torch.Tensor  # (S, P, Hkv, D)
    v_pages: torch.Tensor
    block_table: torch.Tensor  # (B, M) int32
    num_blocks: torch.Tensor  # (B,) int32
    slot_lens: torch.Tensor  # (S,) int32
    scale: float
    softcap: float | None
    rows: list[list[int]]  # selected slots per row, in block-table order

    def args(self):
        return (self.q, self.k_pages, self.v_pages, self.block_table, self.num_blocks, self.slot_lens, self.scale)


def make_case(
    *,
    B: int = 2,
    Tq: int = 1,
    Hq: int = 4,
    Hkv: int = 1,
    D: int = 64,
    P: int = 16,
    dtype: torch.dtype = torch.float32,
    pages: list[int] | None = None,
    ragged: str = "last",
    shuffle: bool = True,
    softcap: float | None = None,
    decoys: int = 3,
    pad_value: int = -1,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Case:
    """Build a random case.

    pages: number of selected pages per row (len B); defaults to varied counts.
    ragged: "none" (all pages full), "last" (last page of each row partial),
        "any" (random lengths in 0..P for any page).
    shuffle: put slots in random pool positions (random block order).
    """
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    if pages is None:
        pages = [rng.randint(1, 5) for _ in range(B)]
    assert len(pages) == B
    total = sum(pages) + decoys
    order = list(range(total))
    if shuffle:
        rng.shuffle(order)
    S = total
    rows, it = [], iter(order)
    for n in pages:
        rows.append([next(it) for _ in range(n)])
    slot_lens = [P] * S
    for row in rows:
        for j, slot in enumerate(row):
            if ragged == "any":
                slot_lens[slot] = rng.randint(0, P)
            elif ragged == "last" and j == len(row) - 1:
                slot_lens[slot] = rng.randint(1, P)
    for slot in range(S):  # decoys get arbitrary lengths too
        if all(slot not in r for r in rows):
            slot_lens[slot] = rng.randint(0, P)

    k = torch.randn(S, P, Hkv, D, generator=gen)
    v = torch.randn(S, P, Hkv, D, generator=gen)
    # Garbage past each slot's length must never be read.
    for slot, n in enumerate(slot_lens):
        k[slot, n:] = float("nan")
        v[slot, n:] = float("nan")
    q = torch.randn(B, Tq, Hq, D, generator=gen)
    M = max(max(pages, default=0) + 1, 1)  # at least one padding column
    bt = torch.full((B, M), pad_value, dtype=torch.int32)
    for b, row in enumerate(rows):
        if row:
            bt[b, : len(row)] = torch.tensor(row, dtype=torch.int32)
    dev = torch.device(device)
    return Case(
        q=q.to(dtype).to(dev),
        k_pages=k.to(dtype).to(dev),
        v_pages=v.to(dtype).to(dev),
        block_table=bt.to(dev),
        num_blocks=torch.tensor(pages, dtype=torch.int32, device=dev),
        slot_lens=torch.tensor(slot_lens, dtype=torch.int32, device=dev),
        scale=D**-0.5,
        softcap=softcap,
        rows=rows,
    )


def dense_expected(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-by-row dense attention over the concatenated valid tokens of the selected pages."""
    outs, lses = [], []
    for b, row in enumerate(case.rows):
        ks = [case.k_pages[s, : int(case.slot_lens[s])] for s in row]
        vs = [case.v_pages[s, : int(case.slot_lens[s])] for s in row]
        Hkv, D = case.k_pages.shape[2], case.k_pages.shape[3]
        k = torch.cat(ks) if ks else case.k_pages.new_zeros(0, Hkv, D)
        v = torch.cat(vs) if vs else case.v_pages.new_zeros(0, Hkv, D)
        o, l = dense_attention_reference(case.q[b : b + 1], k[None], v[None], case.scale, softcap=case.softcap)
        outs.append(o)
        lses.append(l)
    return torch.cat(outs), torch.cat(lses)


def assert_close_attention(out, lse, ref_out, ref_lse, dtype, lse_atol: float | None = None) -> None:
    """Compare (out, lse) pairs; -inf lse must match exactly and nothing may be NaN."""
    assert out.dtype == ref_out.dtype and out.shape == ref_out.shape
    assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape
    assert not torch.isnan(out).any(), "NaN in out"
    assert not torch.isnan(lse).any(), "NaN in lse"
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float().cpu(), ref_out.float().cpu(), atol=atol, rtol=rtol)
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse).cpu(), empty.cpu()), "empty-row pattern differs"
    if lse_atol is None:
        lse_atol = 1e-4 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(
        lse.cpu().masked_fill(empty.cpu(), 0.0), ref_lse.cpu().masked_fill(empty.cpu(), 0.0), atol=lse_atol, rtol=1e-4
    )
