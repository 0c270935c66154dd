"""Sharded attention over a real 2-process gloo group equals unsharded attention.

All cases of ``_dist_cases.CASES`` run in one ``torch.multiprocessing`` group
(one start-up, a few seconds); each test below checks one case's numbers.
Single-process pieces (selection restriction, merge identity) are tested
directly.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
import torch.multiprocessing as mp

from agentctx.kernels import attend_selected_reference
from agentctx.serving.sharding.attention import (
    KVShard,
    local_selection,
    restrict_block_table,
    sharded_attend,
)
from agentctx.serving.sharding.merge import merge_across_ranks
from tests.sharding import _dist_cases

FP32_TOL = 1e-5
BF16_TOL = 2e-2


@pytest.fixture(scope="module")
def dist_results(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("gloo")
    out = tmp / "results.json"
    ctx = mp.start_processes(_dist_cases.run, args=(2, f"file://{tmp}/init", str(out)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            pytest.fail("gloo sharding group did not finish within 120 s")
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", list(_dist_cases.CASES))
def test_sharded_matches_unsharded(dist_results, case):
    r = dist_results[case]
    assert "error" not in r, r.get("error")
    spec = _dist_cases.CASES[case]
    tol = BF16_TOL if spec.get("dtype") == "bfloat16" else FP32_TOL
    assert not r["nan"]
    assert r["inf_match"], "rows with no visible key must have lse = -inf exactly where the reference does"
    assert r["out_err"] <= tol, r
    assert r["lse_err"] <= tol, r
    assert r["same_on_ranks"], "every rank must hold the identical merged result"
    assert r["zeros_where_empty"]
    if spec["sel"] == "none":
        assert r["all_empty"]


def test_case_coverage():
    """The brief's required situations are all in the distributed case list."""
    sels = {c["sel"] for c in _dist_cases.CASES.values()}
    assert {"all", "rank0", "rank1", "none", "mixed_rows", "random"} <= sels
    tqs = {c["Tq"] for c in _dist_cases.CASES.values()}
    assert {1, 5} <= tqs
    assert any(c["Hq"] != c["Hkv"] for c in _dist_cases.CASES.values())  # GQA
    assert {"gather", "reduce"} <= {c.get("merge", "gather") for c in _dist_cases.CASES.values()}


# --------------------------------------------------------------------------- single process
def test_local_selection_restricts_and_remaps():
    sel = local_selection([[0, 5, 3, 7, 5], [1], []], (3, 7), batch=3)
    assert sel.num_blocks.tolist() == [2, 0, 0]
    assert sel.block_table[0, :2].tolist() == [0, 2]  # pages 3, 5 -> local 0, 2 (sorted, unique)
    assert sel.total == 2
    assert sel.block_table.dtype == torch.int32 and sel.num_blocks.dtype == torch.int32
    all_ = local_selection(None, (3, 7), batch=2)
    assert all_.num_blocks.tolist() == [4, 4] and all_.block_table[1].tolist() == [0, 1, 2, 3]
    flat = local_selection([4, 9], (3, 7), batch=2)  # one flat list is shared by every row
    assert flat.num_blocks.tolist() == [1, 1]
    empty = local_selection([], (0, 4), batch=2)
    assert empty.total == 0 and empty.num_blocks.tolist() == [0, 0]


def test_restrict_block_table_device_path_matches_host():
    g = torch.Generator().manual_seed(0)
    table = torch.randint(0, 20, (4, 9), generator=g, dtype=torch.int32)
    num = torch.tensor([9, 0, 5, 3], dtype=torch.int32)
    table[2, 5:] = -7  # garbage padding
    sel = restrict_block_table(table, num, 6, 14)
    for b in range(4):
        exp = [int(x) - 6 for x in table[b, : int(num[b])] if 6 <= int(x) < 14]
        n = int(sel.num_blocks[b])
        assert sel.block_table[b, :n].tolist() == exp  # order kept
        assert (sel.block_table[b, n:] == 0).all()  # padding is a safe slot id
    assert sel.total is None


def test_single_rank_is_plain_attention():
    """Without a process group the sharded path is exactly attend_selected on the local pages."""
    g = torch.Generator().manual_seed(1)
    S, P, Hkv, D, Hq = 5, 4, 2, 8, 4
    k, v = torch.randn(S, P, Hkv, D, generator=g), torch.randn(S, P, Hkv, D, generator=g)
    q = torch.randn(2, 3, Hq, D, generator=g)
    lens = torch.tensor([4, 4, 2, 4, 1], dtype=torch.int32)
    shard = KVShard(0, S, {0: k}, {0: v}, lens)
    sel = shard.select([[0, 2, 4], [1]], batch=2)
    for chunks, dim in ((1, "heads"), (2, "heads"), (2, "batch"), (3, "tokens")):
        out, lse = shard.attend(0, q, sel, 0.3, impl="torch", chunks=chunks, chunk_dim=dim)
        ref_o, ref_l = attend_selected_reference(q, k, v, sel.block_table, sel.num_blocks, lens, 0.3)
        torch.testing.assert_close(out, ref_o, atol=FP32_TOL, rtol=0)
        torch.testing.assert_close(lse, ref_l, atol=FP32_TOL, rtol=0)
    o, l = merge_across_ranks(ref_o, ref_l)
    assert o is ref_o


def test_empty_shard_contributes_nothing_locally():
    k = torch.zeros(0, 4, 2, 8)
    q = torch.randn(1, 1, 4, 8)
    sel = local_selection([1, 2], (5, 5), batch=1)
    out, lse = sharded_attend(q, k, k, torch.zeros(0, dtype=torch.int32), sel, 1 / math.sqrt(8))
    assert (out == 0).all() and torch.isneginf(lse).all()


def test_bad_arguments():
    q = torch.randn(1, 1, 4, 8)
    k = torch.randn(2, 4, 2, 8)
    sel = local_selection(None, (0, 2), batch=1)
    with pytest.raises(ValueError, match="chunk_dim"):
        sharded_attend(q, k, k, torch.full((2,), 4, dtype=torch.int32), sel, 1.0, chunk_dim="layers")
    with pytest.raises(ValueError, match="merge"):
        merge_across_ranks(torch.zeros(1, 8), torch.zeros(1), merge="sum")
    with pytest.raises(ValueError, match="rows"):
        local_selection([[0], [1]], (0, 2), batch=3)
    with pytest.raises(ValueError, match="slot_lens"):
        KVShard(0, 2, {0: k}, {0: k}, torch.full((3,), 4, dtype=torch.int32))


_TRITON_HEAD_CHUNKS = r"""
import json, torch
from agentctx.kernels.reference import attend_selected_reference
from agentctx.serving.sharding.attention import KVShard
g = torch.Generator().manual_seed(0)
S, P, Hkv, D, Hq = 6, 16, 4, 16, 8
k, v = torch.randn(S, P, Hkv, D, generator=g), torch.randn(S, P, Hkv, D, generator=g)
lens = torch.tensor([16, 16, 9, 16, 16, 3], dtype=torch.int32)
q = torch.randn(2, 3, Hq, D, generator=g)
shard = KVShard(0, S, {0: k}, {0: v}, lens)
sel = shard.select([[0, 2, 3, 5], [1]], batch=2)
ro, rl = attend_selected_reference(q, k, v, sel.block_table, sel.num_blocks, lens, 0.25)
errs = {}
for c in (1, 2, 4):
    o, l = shard.attend(0, q, sel, 0.25, impl="triton", chunks=c)
    errs[c] = max(float((o - ro).abs().max()), float((l - rl).abs().max()))
print(json.dumps(errs))
"""


def test_triton_kernel_takes_head_sliced_pages():
    """Head-group chunks pass strided (S, P, Hkv', D) views to the Triton kernel (run in its CPU interpreter)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _TRITON_HEAD_CHUNKS], capture_output=True, text=True, env=env,
                          cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(errs) == {"1", "2", "4"}
    assert max(errs.values()) <= FP32_TOL, errs
