"""Split one context's KV pages into contiguous ranges, one per worker.

A document of ``num_pages`` pages is cut along the sequence axis into
contiguous page ranges ``[start, stop)``; worker ``r`` holds ``ranges[r]`` of
every global layer (its local slot ``i`` is global page ``start + i``).
Attention over any selection is then done shard by shard and merged exactly
(``serving.sharding.attention``).

Placement has two parts, both plain functions of plain data so they can be
tested without GPUs:

* **How many pages each worker gets** (:func:`partition_pages`): proportional
  to a weight (free memory by default), never more than a worker's capacity
  (free memory minus a reserve, in pages); when a worker is capped its excess
  is spread over the others ("water filling"). Without memory information
  (CPU), every worker gets an equal share.
* **In which order the ranges are laid out** (``serving.sharding.topology.chain_order``):
  the chain ``chain[0], chain[1], ...`` holds pages ``0..`` in sequence order and is
  chosen so that consecutive workers sit on well-connected devices (the link costs
  and why neighbours matter are in ``serving.sharding.topology``).

:func:`local_gpu_workers` gathers free memory and link costs for the GPUs of this process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentctx.serving.sharding.topology import _CROSS_NODE_COST, _UNKNOWN_COST, chain_order, topology_costs

__all__ = [
    "WorkerInfo",
    "ShardPlan",
    "partition_pages",
    "equal_ranges",
    "plan_placement",
    "local_gpu_workers",
    "kv_page_bytes",
]


def kv_page_bytes(num_layers: int, page_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of one page across all global layers, K and V together."""
    return 2 * num_layers * page_size * num_kv_heads * head_dim * (torch.finfo(dtype).bits // 8)


@dataclass(frozen=True)
class WorkerInfo:
    """What placement needs to know about one worker (rank ``rank`` of the group).

    device: physical GPU index on its node (None on CPU).
    free_bytes: memory available for KV pages (None when unknown, e.g. CPU).
    node: host name / node id; workers on different nodes get the cross-node link cost.
    """

    rank: int
    device: int | None = None
    free_bytes: int | None = None
    node: str = "local"


@dataclass(frozen=True)
class ShardPlan:
    """Contiguous page ranges of one context, one per rank.

    ranges[r] = (start, stop) for rank r; chain is the ranks in page order
    (ranges[chain[0]] starts at page 0, ranges[chain[i+1]] starts where
    ranges[chain[i]] stops). Empty ranges (start == stop) are allowed.
    """

    num_pages: int
    ranges: tuple[tuple[int, int], ...]
    chain: tuple[int, ...]
    reason: str = ""
    link_costs: tuple[float, ...] = field(default=(), compare=False)  # cost of each chain hop

    def __post_init__(self) -> None:
        n = len(self.ranges)
        if sorted(self.chain) != list(range(n)):
            raise ValueError(f"ShardPlan: chain {self.chain} is not a permutation of range(0, {n})")
        pos = 0
        for r in self.chain:
            start, stop = self.ranges[r]
            if start != pos or stop < start:
                raise ValueError(f"ShardPlan: ranges {self.ranges} are not contiguous in chain order {self.chain}")
            pos = stop
        if pos != self.num_pages:
            raise ValueError(f"ShardPlan: ranges cover {pos} pages, expected {self.num_pages}")

    @property
    def world_size(self) -> int:
        return len(self.ranges)

    def sizes(self) -> list[int]:
        return [b - a for a, b in self.ranges]

    def owner(self, page: int) -> int:
        """Rank holding global page ``page``."""
        for r, (a, b) in enumerate(self.ranges):
            if a <= page < b:
                return r
        raise IndexError(f"page {page} outside [0, {self.num_pages})")

    def localize(self, pages: Sequence[int]) -> list[list[int]]:
        """Split global page ids into per-rank lists of *local* slot ids (page - start).

        Order within each rank follows the input order; duplicates are kept
        (callers pass sets of pages; see ``sharded_attention.local_tables``).
        """
        out: list[list[int]] = [[] for _ in self.ranges]
        if len(pages) == 0:
            return out
        p = torch.as_tensor(list(pages), dtype=torch.long)
        if int(p.min()) < 0 or int(p.max()) >= self.num_pages:
            raise ValueError(f"page ids must lie in [0, {self.num_pages}), got min {int(p.min())} max {int(p.max())}")
        for r, (a, b) in enumerate(self.ranges):
            m = (p >= a) & (p < b)
            out[r] = (p[m] - a).tolist()
        return out


def equal_ranges(num_pages: int, world: int) -> list[int]:
    """Sizes of ``world`` near-equal contiguous ranges (the first ``num_pages % world`` get one more)."""
    if world <= 0:
        raise ValueError(f"world must be >= 1, got {world}")
    base, extra = divmod(num_pages, world)
    return [base + (1 if i < extra else 0) for i in range(world)]


def partition_pages(num_pages: int, weights: Sequence[float],
                    capacities: Sequence[int | None] | None = None) -> list[int]:
    """Page counts per worker, proportional to ``weights`` and within ``capacities``.

    Largest-remainder rounding of ``num_pages * w_i / sum(w)``; a worker whose
    share exceeds its capacity (in pages; None = unbounded) is capped and the
    excess goes to the others, again by weight. Zero-weight workers get pages
    only if nobody else can take them.

    Raises ValueError when the total capacity is smaller than ``num_pages``.
    """
    n = len(weights)
    if n == 0:
        raise ValueError("partition_pages: need at least one worker")
    if num_pages < 0:
        raise ValueError(f"partition_pages: num_pages must be >= 0, got {num_pages}")
    if any(w < 0 for w in weights):
        raise ValueError(f"partition_pages: weights must be >= 0, got {list(weights)}")
    caps = [None if c is None else max(0, int(c)) for c in (capacities or [None] * n)]
    if len(caps) != n:
        raise ValueError(f"partition_pages: {len(caps)} capacities for {n} weights")
    if all(c is not None for c in caps) and sum(caps) < num_pages:
        raise ValueError(
            f"partition_pages: {num_pages} pages do not fit: total capacity is {sum(caps)} pages ({caps})"
        )
    counts = [0] * n
    remaining = num_pages
    open_ = [i for i in range(n) if caps[i] is None or caps[i] > 0]
    while remaining > 0:
        w = {i: float(weights[i]) for i in open_}
        if sum(w.values()) <= 0:  # only zero-weight workers left: treat them equally
            w = {i: 1.0 for i in open_}
        total_w = sum(w.values())
        exact = {i: remaining * w[i] / total_w for i in open_}
        share = {i: int(exact[i]) for i in open_}
        left = remaining - sum(share.values())
        # Largest remainder first; ties go to the lower index (deterministic).
        for i in sorted(open_, key=lambda i: (-(exact[i] - share[i]), i))[:left]:
            share[i] += 1
        capped = False
        for i in open_:
            room = None if caps[i] is None else caps[i] - counts[i]
            take = share[i] if room is None else min(share[i], room)
            counts[i] += take
            remaining -= take
            if room is not None and share[i] >= room:
                capped = True
        open_ = [i for i in open_ if caps[i] is None or counts[i] < caps[i]]
        if not capped or not open_:
            break
    if remaining:
        raise ValueError(f"partition_pages: could not place {remaining} of {num_pages} pages within {caps}")
    return counts


def plan_placement(
    num_pages: int,
    workers: Sequence[WorkerInfo],
    page_bytes: int,
    link_costs: Sequence[Sequence[float]] | None = None,
    reserve_bytes: int = 0,
    policy: str = "memory",
) -> ShardPlan:
    """Assign contiguous page ranges to ``workers`` (indexed by rank).

    Args:
        num_pages: pages of the context.
        workers: one WorkerInfo per rank, ``workers[r].rank == r``.
        page_bytes: bytes one page needs on a worker (all global layers, K+V).
        link_costs: cost between *physical devices* (indexed by
            ``WorkerInfo.device``), e.g. ``link_cost_matrix(parse_nvidia_smi_topo(...))``;
            None keeps rank order. Workers on different nodes get the cross-node cost.
        reserve_bytes: memory to leave free on every worker (activations, workspaces).
        policy: "memory" (pages proportional to free memory; equal without
            memory info) or "equal" (equal pages, still within capacity).

    Raises:
        ValueError: the pages do not fit, or inconsistent inputs.
    """
    n = len(workers)
    if n == 0:
        raise ValueError("plan_placement: no workers")
    if [w.rank for w in workers] != list(range(n)):
        raise ValueError(f"plan_placement: workers must be given in rank order 0..{n - 1}")
    if page_bytes <= 0:
        raise ValueError(f"plan_placement: page_bytes must be > 0, got {page_bytes}")
    if policy not in ("memory", "equal"):
        raise ValueError(f"plan_placement: policy must be 'memory' or 'equal', got {policy!r}")
    known = all(w.free_bytes is not None for w in workers)
    caps: list[int | None] = [
        None if w.free_bytes is None else max(0, (w.free_bytes - reserve_bytes) // page_bytes) for w in workers
    ]
    if policy == "memory" and known:
        weights = [float(max(0, w.free_bytes - reserve_bytes)) for w in workers]
        reason = "pages proportional to free memory"
    else:
        weights = [1.0] * n
        reason = "equal pages" + ("" if known else " (no memory information)")
    try:
        sizes = partition_pages(num_pages, weights, caps)
    except ValueError as exc:
        need = num_pages * page_bytes
        have = sum(c or 0 for c in caps) * page_bytes
        raise ValueError(
            f"context of {num_pages} pages ({need / 2**30:.1f} GiB) does not fit on {n} workers "
            f"(room for {have / 2**30:.1f} GiB after a {reserve_bytes / 2**30:.1f} GiB reserve each): {exc}"
        ) from exc

    hop_costs: tuple[float, ...] = ()
    if link_costs is not None and n > 1:
        def cost(a: int, b: int) -> float:
            wa, wb = workers[a], workers[b]
            if wa.node != wb.node:
                return _CROSS_NODE_COST
            if wa.device is None or wb.device is None:
                return _UNKNOWN_COST
            return float(link_costs[wa.device][wb.device])

        cmat = [[0.0 if a == b else cost(a, b) for b in range(n)] for a in range(n)]
        chain = chain_order(cmat)
        hop_costs = tuple(cmat[a][b] for a, b in zip(chain, chain[1:]))
        reason += "; chain ordered by link cost"
    else:
        chain = list(range(n))
    ranges: list[tuple[int, int]] = [(0, 0)] * n
    pos = 0
    # Sizes belong to ranks; the chain only decides where each rank's range lies.
    for r in chain:
        ranges[r] = (pos, pos + sizes[r])
        pos += sizes[r]
    return ShardPlan(num_pages, tuple(ranges), tuple(chain), reason, hop_costs)


def local_gpu_workers(devices: Sequence[int] | None = None) -> tuple[list[WorkerInfo], list[list[float]] | None]:
    """WorkerInfo (free memory) for local CUDA devices and their link costs.

    Link costs come from ``nvidia-smi topo -m`` when the tool is on PATH and
    parses, else from peer-access queries. On a machine without CUDA returns
    ([], None). Creates a CUDA context on each listed device.
    """
    if not torch.cuda.is_available():
        return [], None
    devices = list(range(torch.cuda.device_count())) if devices is None else list(devices)
    workers = []
    for r, d in enumerate(devices):
        free, _total = torch.cuda.mem_get_info(d)
        workers.append(WorkerInfo(rank=r, device=d, free_bytes=int(free)))
    return workers, topology_costs()
