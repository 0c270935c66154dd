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
* **In which order the ranges are laid out** (:func:`chain_order`): the chain
  ``chain[0], chain[1], ...`` holds pages ``0..`` in sequence order and is
  chosen so that consecutive workers sit on well-connected devices (NVLink
  before PCIe switch before host bridge before the inter-socket link). That
  matters for everything that moves data between *neighbouring* ranges:
  causal ring prefill (range i's queries need the keys of range i-1), growing
  the context (the last range spills into the next worker) and rebalancing
  (boundary pages move to the neighbour). The decode merge itself is an
  all-gather that does not care about the order.

Topology comes from ``nvidia-smi topo -m`` (:func:`parse_nvidia_smi_topo`) or,
without it, from ``torch.cuda.can_device_access_peer`` (:func:`peer_link_costs`);
:func:`local_gpu_workers` gathers both for the GPUs of this process.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

__all__ = [
    "WorkerInfo",
    "ShardPlan",
    "partition_pages",
    "equal_ranges",
    "parse_nvidia_smi_topo",
    "link_cost",
    "link_cost_matrix",
    "peer_link_costs",
    "chain_order",
    "plan_placement",
    "local_gpu_workers",
    "kv_page_bytes",
    "topology_costs",
]

# Relative cost of a link between two GPUs, lower is better. NVLink with k
# bonded links costs 1 + 1/k (more links, cheaper), always below any PCIe path.
_PCIE_COST = {"PIX": 3.0, "PXB": 4.0, "PHB": 5.0, "NODE": 6.0, "SOC": 7.0, "SYS": 7.0}
_UNKNOWN_COST = 8.0
_CROSS_NODE_COST = 10.0


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


# --------------------------------------------------------------------------- topology
def parse_nvidia_smi_topo(text: str) -> list[list[str]]:
    """GPU-to-GPU link labels from ``nvidia-smi topo -m`` output.

    Returns an n x n matrix of labels ("X", "NV12", "PIX", "PXB", "PHB",
    "NODE", "SYS", ...) for the GPUs ``GPU0..GPU{n-1}``, in index order.
    NIC rows/columns and the affinity columns are ignored.
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header on a terminal
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header = None
    for ln in lines:
        cols = ln.split()
        if cols and cols[0].startswith("GPU") and re.fullmatch(r"GPU\d+", cols[0]) and header is None:
            # The header has no row label: its first token is GPU0 and so is the second row's.
            header = cols
            break
    if header is None:
        raise ValueError("parse_nvidia_smi_topo: no GPU header line found")
    gpu_cols = [i for i, c in enumerate(header) if re.fullmatch(r"GPU\d+", c)]
    n = len(gpu_cols)
    rows: dict[int, list[str]] = {}
    seen_header = False
    for ln in lines:
        cols = ln.split()
        if not cols:
            continue
        if not seen_header and cols == header:
            seen_header = True
            continue
        m = re.fullmatch(r"GPU(\d+)", cols[0])
        if seen_header and m:
            labels = cols[1 : 1 + len(header)]
            rows[int(m.group(1))] = [labels[i] for i in gpu_cols if i < len(labels)]
    if sorted(rows) != list(range(n)) or any(len(r) != n for r in rows.values()):
        raise ValueError(f"parse_nvidia_smi_topo: expected {n} GPU rows of {n} labels, got {rows}")
    return [rows[i] for i in range(n)]


def link_cost(label: str) -> float:
    """Cost of one link label (lower is better): X 0, NV<k> 1 + 1/k, PIX 3 ... SYS 7, unknown 8."""
    label = label.strip().upper()
    if label == "X":
        return 0.0
    m = re.fullmatch(r"NV(\d+)", label)
    if m:
        return 1.0 + 1.0 / max(1, int(m.group(1)))
    return _PCIE_COST.get(label, _UNKNOWN_COST)


def link_cost_matrix(labels: Sequence[Sequence[str]]) -> list[list[float]]:
    """Symmetric cost matrix from a label matrix (the worse direction wins if they differ)."""
    n = len(labels)
    c = [[link_cost(labels[i][j]) for j in range(n)] for i in range(n)]
    return [[max(c[i][j], c[j][i]) for j in range(n)] for i in range(n)]


def peer_link_costs(num_devices: int | None = None) -> list[list[float]]:
    """Cost matrix from ``torch.cuda.can_device_access_peer``: 2 with peer access, 7 without."""
    n = torch.cuda.device_count() if num_devices is None else num_devices
    return [
        [0.0 if i == j else (2.0 if torch.cuda.can_device_access_peer(i, j) else 7.0) for j in range(n)]
        for i in range(n)
    ]


def _path_cost(path: Sequence[int], cost: Sequence[Sequence[float]]) -> float:
    return sum(cost[a][b] for a, b in zip(path, path[1:]))


def chain_order(cost: Sequence[Sequence[float]], exact_up_to: int = 8) -> list[int]:
    """Order of ``n`` workers minimising the summed cost of consecutive pairs.

    Exhaustive over permutations for n <= ``exact_up_to`` (8! = 40320 paths:
    milliseconds), greedy nearest-neighbour from every start otherwise. Ties go
    to the lexicographically smallest order, so equal costs keep rank order.
    """
    n = len(cost)
    if n <= 2:
        return list(range(n))
    if n <= exact_up_to:
        best, best_cost = None, float("inf")
        for perm in itertools.permutations(range(n)):
            if perm[0] > perm[-1]:
                continue  # a path and its reverse cost the same; keep the one starting lower
            c = _path_cost(perm, cost)
            if c < best_cost - 1e-12:
                best, best_cost = list(perm), c
        return best
    best, best_cost = None, float("inf")
    for start in range(n):
        path, left = [start], set(range(n)) - {start}
        while left:
            nxt = min(left, key=lambda j: (cost[path[-1]][j], j))
            path.append(nxt)
            left.remove(nxt)
        c = _path_cost(path, cost)
        if c < best_cost - 1e-12:
            best, best_cost = path, c
    return best


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


def topology_costs() -> list[list[float]] | None:
    """Physical-device link costs from nvidia-smi, else from peer access; None without CUDA."""
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            text = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20, check=True).stdout
            return link_cost_matrix(parse_nvidia_smi_topo(text))
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    if torch.cuda.is_available():
        return peer_link_costs()
    return None
