"""Launch parameters of the page-attention Triton kernels: block sizes, the split count along the
pages, warps and stages (:func:`choose_config`), and the merge kernel's head-dim slice.

Pure Python (no Triton import): the heuristics are shared by :mod:`.triton_attend`,
:mod:`.triton_attend_quant`, :mod:`.triton_union` and :mod:`.triton_tail`, and the tuning sweeps
and benches read them without compiling anything.
"""

from __future__ import annotations

import torch

__all__ = ["TritonConfig", "choose_config"]


class TritonConfig:
    """Launch parameters of :func:`triton_attend_selected` (all ints).

    ``num_splits`` is an upper bound; the launcher rounds it so that every
    split gets the same number of chunks.
    """

    __slots__ = ("block_m", "block_n", "num_splits", "num_warps", "num_stages")

    def __init__(self, block_m: int, block_n: int, num_splits: int, num_warps: int, num_stages: int):
        self.block_m = block_m
        self.block_n = block_n
        self.num_splits = num_splits
        self.num_warps = num_warps
        self.num_stages = num_stages

    def __repr__(self) -> str:
        return (f"TritonConfig(block_m={self.block_m}, block_n={self.block_n}, num_splits={self.num_splits}, "
                f"num_warps={self.num_warps}, num_stages={self.num_stages})")


_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # interpreter: a few splits still exercise the merge kernel
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def choose_config(B: int, Tq: int, Hq: int, Hkv: int, D: int, P: int, M: int, device: torch.device,
                  block_n: int | None = None, num_splits: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None) -> TritonConfig:
    """Heuristic launch parameters; any argument given explicitly wins (for tuning sweeps).

    Split count: enough programs to give every SM a few (decode with 1 KV
    head has only B * Hkv = 1 program otherwise), but never splits of fewer
    than ~128 tokens, whose fixed cost (q load, partial write, merge) would
    dominate. It is derived from M (the block-table width) rather than
    max(num_blocks) to avoid a device->host sync on every call.
    """
    rows = Tq * (Hq // Hkv)
    block_m = 16 if rows <= 16 else (32 if rows <= 32 else 64)  # tl.dot needs M >= 16
    block_d = _next_pow2(max(D, 16))
    if block_n is None:
        # ~16 KB K and V tiles (64x128 or 32x256 bf16): ~40 KB shared memory and
        # <= ~120 registers per program on sm_90, so 4 programs fit per SM.
        block_n = 32 if (block_d >= 256 or block_m >= 64) else 64
        block_n = max(16, min(block_n, _next_pow2(P)))
    chunks_per_page = -(-P // block_n)
    total_chunks = max(1, M * chunks_per_page)
    m_tiles = -(-rows // block_m)
    if num_splits is None:
        base = B * Hkv * m_tiles
        # ~4 resident programs per SM, each with one K+V tile prefetch in
        # flight, keeps >= 100 KB of loads outstanding per SM (enough for HBM).
        target = 4 * _sm_count(device)
        min_chunks = max(1, 128 // block_n)
        num_splits = max(1, min(-(-target // base), -(-total_chunks // min_chunks), 1024))
    if num_warps is None:
        num_warps = 8 if block_m * block_d >= 64 * 128 else 4
    if num_stages is None:
        # The slot -> K/V address chain costs one pipeline stage, so 3 stages
        # give a one-tile-deep cp.async prefetch of K and V (checked in TTGIR
        # for sm_90); more stages do not deepen it. Bytes in flight per SM
        # come from running ~4 programs per SM instead (see target above).
        num_stages = 3
    return TritonConfig(block_m, block_n, num_splits, num_warps, num_stages)


def _merge_block_d(rows: int, block_d: int, n_sm: int) -> int:
    """Head-dim slice per merge program. Decode has few (token, head) rows (Gemma: 4), and
    64-wide slices gave 16 programs that each walk every split serially (~5 us at 122
    splits on an H200); narrower slices spread the same bytes over enough programs."""
    for bd in (64, 32):
        if bd <= block_d and rows * (-(-block_d // bd)) >= n_sm:
            return bd
    return min(16, block_d)
