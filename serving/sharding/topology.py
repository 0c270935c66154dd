"""GPU link topology: what a link between two GPUs costs, and the chain order of workers that follows.

Placement (``serving.sharding.plan``) lays the page ranges out along a chain of workers so that
neighbouring ranges sit on well-connected devices: NVLink before PCIe switch before host bridge
before the inter-socket link. That matters for everything that moves data between *neighbouring*
ranges: causal ring prefill (range i's queries need the keys of range i-1), growing the context
(the last range spills into the next worker) and rebalancing (boundary pages move to the
neighbour). The decode merge itself is an all-gather that does not care about the order.

Link costs come from ``nvidia-smi topo -m`` (:func:`parse_nvidia_smi_topo`) or, without it, from
``torch.cuda.can_device_access_peer`` (:func:`peer_link_costs`); :func:`chain_order` turns a cost
matrix into the chain. Kept apart from ``plan``: this file knows the machine (which devices
are close), the plan knows the document (how many pages go where) and takes link costs and
the chain order from here.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from collections.abc import Sequence

import torch

__all__ = [
    "parse_nvidia_smi_topo",
    "link_cost",
    "link_cost_matrix",
    "peer_link_costs",
    "chain_order",
    "topology_costs",
]

# Relative cost of a link between two GPUs, lower is better. NVLink with k
# bonded links costs 1 + 1/k (more links, cheaper), always below any PCIe path.
_PCIE_COST = {"PIX": 3.0, "PXB": 4.0, "PHB": 5.0, "NODE": 6.0, "SOC": 7.0, "SYS": 7.0}
_UNKNOWN_COST = 8.0
_CROSS_NODE_COST = 10.0


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
