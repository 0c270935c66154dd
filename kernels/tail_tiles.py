"""Tiling of the slot kernels (kernels/triton_tail.py): row tiles and the window band's split count.

Shared by the launcher (kernels/tail_merge.py), which keys its first-call checks on them, and
the Triton kernels, which launch with them. Sweeps and profiles override ``WINDOW_SPLITS``
(and patch ``WINDOW_BLOCK_M``) here.
"""

from __future__ import annotations

__all__ = ["WINDOW_BLOCK_M", "WINDOW_MIN_SPLIT_STEPS", "WINDOW_SPLITS", "window_splits", "block_m_for"]

# Row tile of the window kernel, whatever the row count. Each tile streams a band of
# W + rows/group entries (W = 512 for Gemma 3) with an fp32 PV product. Measured on the H200
# (Gemma-3-270M, bench/experiments/prefill_paths.py and bench/experiments/profile_step.py): 16-row tiles beat 64-row
# ones for a prefill chunk (1.14-1.19x, 32K-512K tokens) and for a 24-token prompt's forward
# at 1M (4.45 vs 7.82 ms); with 64-row tiles the prompt ran slower than the SDPA band path.
WINDOW_BLOCK_M = 16
# Split-K of the window band (kernels/triton_tail.py): each program streams at least this many
# key steps, so its fixed cost (q load, partial write, a share of the merge) stays small
# against the loop. WINDOW_SPLITS, when set, overrides the rule (sweeps and the profile).
WINDOW_MIN_SPLIT_STEPS = 2
WINDOW_SPLITS: int | None = None


def window_splits(rows: int, hkv: int, window: int, block_n: int, n_sm: int) -> int:
    """Programs per row tile along the window band: enough to fill ~2 programs per SM when the
    grid is small (decode: one KV head, one tile), 1 when the tiles alone fill the GPU (prefill
    chunks), never steps fewer than WINDOW_MIN_SPLIT_STEPS per program."""
    if WINDOW_SPLITS is not None:
        return WINDOW_SPLITS
    programs = hkv * -(-rows // WINDOW_BLOCK_M)
    band = window + WINDOW_BLOCK_M  # a tile's band: the window plus its own rows' spread
    most = max(1, band // (WINDOW_MIN_SPLIT_STEPS * block_n))
    return max(1, min(most, -(-2 * n_sm // programs)))


def block_m_for(rows: int, kind: str = "tail_merged") -> int:
    """Row tile of the slot kernels for (query token, head-in-group) rows; tl.dot needs >= 16."""
    if kind == "window":
        return WINDOW_BLOCK_M
    return 16 if rows <= 16 else (32 if rows <= 32 else 64)
