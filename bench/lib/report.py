"""Helpers every session-style report shares: a timestamped log, token-count sizes, compact numbers."""

from __future__ import annotations

import math
import time

__all__ = ["HEADLINE_BUDGET", "T0", "fmt", "log", "parse_size", "size_label"]

#: The selection budget (share of the context) that headline figures and targets use.
HEADLINE_BUDGET = 0.12
#: When the benchmark process started (its first import of this module): the log's clock and
#: the zero of a session's time budget.
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def parse_size(s: str) -> int:
    """"8k" -> 8192, "1m" -> 1048576, "1000" -> 1000."""
    s = s.strip().lower()
    mult = {"k": 1024, "m": 1024 * 1024}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "km" else s) * mult)


def size_label(n: int) -> str:
    """8192 -> "8K", 1048576 -> "1M", 1000 -> "1000"."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return str(n)


def fmt(x: float | None, unit: str = "", digits: int = 3) -> str:
    """A number in 3-4 significant characters with k/M/G suffixes; "-" for None, NaN and inf."""
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "-"
    ax = abs(x)
    for lim, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= lim:
            return f"{x / lim:.{max(0, digits - len(str(int(ax / lim))))}f}{suf}{unit}"
    if ax >= 100:
        return f"{x:.0f}{unit}"
    if ax >= 10:
        return f"{x:.1f}{unit}"
    if ax >= 1:
        return f"{x:.2f}{unit}"
    return f"{x:.3g}{unit}"
