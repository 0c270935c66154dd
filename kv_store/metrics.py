"""Counters and the metrics dict the store reports.

The store actor owns one :class:`StoreCounters` (it sees every put, get,
eviction and free); :func:`build_metrics` turns counters plus live state into
the flat-ish dict ``KVStore.metrics()`` returns, so its shape is defined in
one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["StoreCounters", "refcount_histogram", "build_metrics", "REFCOUNT_BUCKETS"]

#: Upper bounds (inclusive) of the refcount histogram buckets; the last is open-ended.
REFCOUNT_BUCKETS = (0, 1, 2, 4, 8, 16, 32)


@dataclass
class StoreCounters:
    """Monotonic event counters of one store actor (reset when it restarts)."""

    puts: int = 0  # pages newly stored
    put_dedup: int = 0  # pages already present when put (prefix sharing)
    hits: int = 0  # page reads served from the host tier
    misses: int = 0  # page reads that found nothing (before any disk restore)
    restores: int = 0  # misses served by reloading a spilled page
    evictions: int = 0  # refcount-0 pages dropped for the byte budget
    frees: int = 0  # pages dropped because no context or holder uses them any more
    spilled: int = 0  # pages written to disk
    reaped_leases: int = 0  # expired holder leases reclaimed
    over_budget_events: int = 0  # times eviction couldn't reach the budget (all pages held)


def refcount_histogram(refcounts: Iterable[int]) -> dict[str, int]:
    """Bucketed counts: keys "0", "1", "2", "3-4", "5-8", ..., ">32"."""
    counts: Counter[str] = Counter()
    for rc in refcounts:
        lo = 0
        for hi in REFCOUNT_BUCKETS:
            if rc <= hi:
                counts[str(hi) if lo == hi else f"{lo}-{hi}"] += 1
                break
            lo = hi + 1
        else:
            counts[f">{REFCOUNT_BUCKETS[-1]}"] += 1
    return dict(counts)


def build_metrics(
    counters: StoreCounters,
    *,
    host_pages: int,
    host_bytes: int,
    budget_bytes: int,
    blob_count: int,
    blob_bytes: int,
    refcounts: Iterable[int],
    directory: dict[str, int],
    disk: dict[str, int] | None = None,
    backend: str = "",
) -> dict[str, Any]:
    """The metrics dict: tiers, counters, refcount histogram and directory stats."""
    lookups = counters.hits + counters.misses
    return {
        "backend": backend,
        "tiers": {
            "host": {"pages": host_pages, "bytes": host_bytes, "budget_bytes": budget_bytes,
                     "blobs": blob_count, "blob_bytes": blob_bytes},
            "disk": dict(disk or {"pages": 0, "bytes": 0}),
        },
        "pages": host_pages,
        "bytes": host_bytes,
        **asdict(counters),
        "hit_rate": (counters.hits / lookups) if lookups else None,
        "refcount_histogram": refcount_histogram(refcounts),
        "directory": dict(directory),
    }
