"""Page-range placement: memory-proportional sizes, topology-ordered chains (plain data, no GPUs)."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.sharding.plan import (
    ShardPlan,
    WorkerInfo,
    equal_ranges,
    kv_page_bytes,
    partition_pages,
    plan_placement,
)
from agentctx.serving.sharding.topology import chain_order, link_cost, link_cost_matrix, parse_nvidia_smi_topo

GiB = 1 << 30

# Hand-written in the layout of `nvidia-smi topo -m`: 4 GPUs where the NVLink
# path is 0-2-1-3 (rank order 0-1-2-3 would cross the slow SYS links).
TOPO_NVLINK_PATH = """\
\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\tNV12\tSYS\tSYS\t0-31\t0\t\tN/A
GPU1\tSYS\t X \tNV12\tNV8\tSYS\t0-31\t0\t\tN/A
GPU2\tNV12\tNV12\t X \tSYS\tSYS\t32-63\t1\t\tN/A
GPU3\tSYS\tNV8\tSYS\t X \tPHB\t32-63\t1\t\tN/A
NIC0\tSYS\tSYS\tSYS\tPHB\t X \t\t\t\t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
"""

# 8 PCIe GPUs: pairs behind one switch (PIX), pairs of pairs under one root (PXB),
# GPUs 0-3 on socket 0 and 4-7 on socket 1 (SYS between sockets).
_P8 = [
    ["X", "PIX", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"],
    ["PIX", "X", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"],
    ["PXB", "PXB", "X", "PIX", "SYS", "SYS", "SYS", "SYS"],
    ["PXB", "PXB", "PIX", "X", "SYS", "SYS", "SYS", "SYS"],
    ["SYS", "SYS", "SYS", "SYS", "X", "PIX", "PXB", "PXB"],
    ["SYS", "SYS", "SYS", "SYS", "PIX", "X", "PXB", "PXB"],
    ["SYS", "SYS", "SYS", "SYS", "PXB", "PXB", "X", "PIX"],
    ["SYS", "SYS", "SYS", "SYS", "PXB", "PXB", "PIX", "X"],
]
TOPO_PCIE8 = "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\n" + "".join(
    f"GPU{i}\t" + "\t".join(row) + f"\t{'0-15' if i < 4 else '16-31'}\t{0 if i < 4 else 1}\n"
    for i, row in enumerate(_P8)
)


# --------------------------------------------------------------------------- sizes
def test_equal_ranges():
    assert equal_ranges(10, 3) == [4, 3, 3]
    assert equal_ranges(2, 4) == [1, 1, 0, 0]
    with pytest.raises(ValueError):
        equal_ranges(3, 0)


def test_partition_proportional_and_exact_total():
    assert partition_pages(12, [2, 1]) == [8, 4]
    assert partition_pages(10, [1, 1, 1]) == [4, 3, 3]  # largest remainder, ties to the lower index
    for n in (0, 1, 7, 1000, 4099):
        assert sum(partition_pages(n, [3.0, 1.5, 0.5, 2.0])) == n


def test_partition_caps_and_water_fill():
    assert partition_pages(10, [1, 1, 1], [2, None, None]) == [2, 4, 4]
    # The capped worker's excess goes to the others; a second one caps in the next round.
    assert partition_pages(100, [10, 1, 1], [20, 50, 35]) == [20, 45, 35]
    assert partition_pages(6, [0, 1], [10, 2]) == [4, 2]  # zero weight takes pages only when needed
    assert partition_pages(3, [0, 0]) == [2, 1]


def test_partition_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        partition_pages(11, [1, 1], [5, 5])
    with pytest.raises(ValueError):
        partition_pages(3, [1, -1])


def test_plan_memory_proportional_with_reserve():
    workers = [WorkerInfo(0, 0, 80 * GiB), WorkerInfo(1, 1, 40 * GiB)]
    plan = plan_placement(56, workers, page_bytes=GiB, reserve_bytes=4 * GiB)
    assert plan.sizes() == [38, 18]  # 76 : 36 GiB usable
    assert plan.ranges == ((0, 38), (38, 56)) and plan.chain == (0, 1)
    assert "free memory" in plan.reason
    eq = plan_placement(56, workers, page_bytes=GiB, reserve_bytes=4 * GiB, policy="equal")
    assert eq.sizes() == [28, 28]


def test_plan_cpu_fallback_is_equal_ranges():
    plan = plan_placement(10, [WorkerInfo(r) for r in range(3)], page_bytes=123)
    assert plan.ranges == ((0, 4), (4, 7), (7, 10))
    assert "no memory information" in plan.reason


def test_llama8b_4m_tokens_needs_four_h200():
    """The brief's arithmetic: 4M tokens of Llama-3-8B KV is 512 GiB; one ~139 GiB GPU holds ~1M."""
    page_bytes = kv_page_bytes(32, 256, 8, 128, torch.bfloat16)
    assert page_bytes == 32 << 20
    pages_4m = (4 << 20) // 256
    assert pages_4m * page_bytes == 512 * GiB
    h200 = 139 * GiB
    with pytest.raises(ValueError, match="does not fit on 1 workers"):
        plan_placement(pages_4m, [WorkerInfo(0, 0, h200)], page_bytes, reserve_bytes=4 * GiB)
    with pytest.raises(ValueError, match="does not fit"):
        plan_placement(pages_4m, [WorkerInfo(r, r, h200) for r in range(2)], page_bytes, reserve_bytes=4 * GiB)
    plan4 = plan_placement(pages_4m, [WorkerInfo(r, r, h200) for r in range(4)], page_bytes, reserve_bytes=4 * GiB)
    assert plan4.sizes() == [4096] * 4
    plan1 = plan_placement((1 << 20) // 256, [WorkerInfo(0, 0, h200)], page_bytes, reserve_bytes=4 * GiB)
    assert plan1.sizes() == [4096]


# --------------------------------------------------------------------------- topology
def test_parse_topology_nvlink():
    labels = parse_nvidia_smi_topo(TOPO_NVLINK_PATH)
    assert labels == [
        ["X", "SYS", "NV12", "SYS"],
        ["SYS", "X", "NV12", "NV8"],
        ["NV12", "NV12", "X", "SYS"],
        ["SYS", "NV8", "SYS", "X"],
    ]
    assert parse_nvidia_smi_topo(TOPO_PCIE8) == _P8


def test_parse_topology_rejects_garbage():
    with pytest.raises(ValueError):
        parse_nvidia_smi_topo("No devices were found\n")


def test_link_costs_order():
    assert link_cost("X") == 0
    assert link_cost("NV18") < link_cost("NV4") < link_cost("PIX") < link_cost("PXB") < link_cost("PHB")
    assert link_cost("PHB") < link_cost("NODE") < link_cost("SYS") < link_cost("???")
    m = link_cost_matrix([["X", "NV2"], ["PIX", "X"]])  # asymmetric input: the worse label wins
    assert m[0][1] == m[1][0] == link_cost("PIX")


def test_chain_follows_nvlink_path():
    costs = link_cost_matrix(parse_nvidia_smi_topo(TOPO_NVLINK_PATH))
    assert chain_order(costs) == [0, 2, 1, 3]
    workers = [WorkerInfo(r, r, 100 * GiB) for r in range(4)]
    plan = plan_placement(40, workers, page_bytes=GiB, link_costs=costs)
    assert plan.chain == (0, 2, 1, 3)
    # Ranks keep their sizes; ranges are laid out along the chain.
    assert plan.ranges == ((0, 10), (20, 30), (10, 20), (30, 40))
    assert all(c < link_cost("PIX") for c in plan.link_costs)  # every hop is NVLink
    assert [plan.owner(p) for p in (0, 10, 20, 39)] == [0, 2, 1, 3]


def test_chain_groups_sockets_with_scrambled_devices():
    costs = link_cost_matrix(parse_nvidia_smi_topo(TOPO_PCIE8))
    devices = [4, 0, 5, 1, 6, 2, 7, 3]  # rank r runs on GPU devices[r]
    workers = [WorkerInfo(r, d, 80 * GiB) for r, d in enumerate(devices)]
    plan = plan_placement(64, workers, page_bytes=GiB, link_costs=costs)
    chain_devices = [devices[r] for r in plan.chain]
    sockets = [d // 4 for d in chain_devices]
    assert sockets.count(sockets[0]) == 4 and sockets[:4] == [sockets[0]] * 4  # one socket crossing only
    assert sum(1 for c in plan.link_costs if c == link_cost("SYS")) == 1
    # PIX partners are adjacent.
    pos = {d: i for i, d in enumerate(chain_devices)}
    for a, b in ((0, 1), (2, 3), (4, 5), (6, 7)):
        assert abs(pos[a] - pos[b]) == 1


def test_chain_cross_node_and_greedy():
    workers = [WorkerInfo(0, 0, GiB, "a"), WorkerInfo(1, 0, GiB, "b"), WorkerInfo(2, 1, GiB, "a"),
               WorkerInfo(3, 1, GiB, "b")]
    costs = [[0.0, 1.5], [1.5, 0.0]]  # both nodes: GPU0-GPU1 NVLink
    plan = plan_placement(8, workers, page_bytes=1, link_costs=costs)
    nodes = [workers[r].node for r in plan.chain]
    assert nodes in (["a", "a", "b", "b"], ["b", "b", "a", "a"])
    # n > 8 uses the greedy search: a line 0-1-...-9 hidden behind a permutation is still found.
    n = 10
    perm = [3, 7, 0, 9, 1, 5, 2, 8, 6, 4]
    line = [[0.0 if i == j else (1.0 if abs(perm.index(i) - perm.index(j)) == 1 else 7.0) for j in range(n)]
            for i in range(n)]
    order = chain_order(line)
    assert order in (perm, perm[::-1])


def test_shard_plan_validation_and_localize():
    plan = ShardPlan(10, ((4, 10), (0, 4)), (1, 0))
    assert plan.localize([0, 3, 4, 9]) == [[0, 5], [0, 3]]
    assert plan.localize([]) == [[], []]
    with pytest.raises(ValueError):
        plan.localize([10])
    with pytest.raises(IndexError):
        plan.owner(10)
    with pytest.raises(ValueError, match="contiguous"):
        ShardPlan(10, ((0, 4), (5, 10)), (0, 1))
    with pytest.raises(ValueError, match="cover"):
        ShardPlan(10, ((0, 4), (4, 9)), (0, 1))
    with pytest.raises(ValueError, match="permutation"):
        ShardPlan(10, ((0, 4), (4, 10)), (0, 0))
