"""Cases for sharded attention, run inside a 2-process gloo group.

``run(rank, world, init, out_path)`` is the ``torch.multiprocessing`` entry
point: every rank builds identical random inputs from a per-case seed, holds
only its page range, runs the sharded attention and compares with the
unsharded reference (which every rank can compute because the inputs are
identical). Rank 0 writes ``{case: {...errors...}}`` as JSON; the tests in
``test_sharded_attention.py`` assert on it. Running all cases in one group
keeps the cost to one process start-up.
"""

from __future__ import annotations

import json
import math
import traceback
import zlib

import torch
import torch.distributed as dist

from agentctx.kernels import attend_selected_reference, dense_attention_reference
from agentctx.serving.sharding.attention import KVShard, local_selection, restrict_block_table, sharded_attend
from agentctx.serving.sharding.plan import equal_ranges

# name -> spec. sel: "all" | "rank0" | "rank1" | "none" | "random" | "mixed_rows"
#        (mixed_rows: row 0 only rank-0 pages, row 1 pages of both ranks, row 2 nothing)
CASES: dict[str, dict] = {
    "all_gqa_tq1": dict(Hq=8, Hkv=2, D=16, Tq=1, B=1, sel="all"),
    "all_gqa_tq5": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="all"),
    "only_rank0_tq5": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="rank0"),
    "only_rank1_tq1": dict(Hq=8, Hkv=2, D=16, Tq=1, B=1, sel="rank1"),
    "empty_everywhere": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="none"),
    "mixed_rows_b3": dict(Hq=8, Hkv=2, D=16, Tq=5, B=3, sel="mixed_rows"),
    "random_reduce_tq5": dict(Hq=8, Hkv=2, D=16, Tq=5, B=2, sel="random", merge="reduce"),
    "only_rank1_reduce": dict(Hq=8, Hkv=2, D=16, Tq=1, B=1, sel="rank1", merge="reduce"),
    "empty_reduce": dict(Hq=8, Hkv=2, D=16, Tq=1, B=2, sel="none", merge="reduce"),
    "heads_chunks2_gather": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="random", chunks=2),
    "heads_chunks3_reduce": dict(Hq=12, Hkv=4, D=16, Tq=5, B=1, sel="random", chunks=3, merge="reduce"),
    "batch_chunks2": dict(Hq=8, Hkv=2, D=16, Tq=1, B=3, sel="mixed_rows", chunks=2, chunk_dim="batch"),
    "token_chunks3": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="random", chunks=3, chunk_dim="tokens"),
    "mha_ragged_softcap": dict(Hq=4, Hkv=4, D=8, Tq=5, B=2, sel="random", ragged=True, softcap=5.0),
    "llama_heads_tq1": dict(Hq=32, Hkv=8, D=128, Tq=1, B=1, sel="all", S=6, P=8, chunks=4),
    "uneven_plan_rank1_empty": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="all", ranges=((0, 9), (9, 9))),
    "uneven_plan_chain_reversed": dict(Hq=8, Hkv=2, D=16, Tq=1, B=2, sel="random", ranges=((6, 9), (0, 6))),
    "device_restrict": dict(Hq=8, Hkv=2, D=16, Tq=5, B=2, sel="random", device_table=True),
    "bf16_all": dict(Hq=8, Hkv=2, D=16, Tq=5, B=1, sel="all", dtype="bfloat16"),
    "dense_prefix_tokens": dict(Hq=8, Hkv=2, D=16, Tq=7, B=1, sel="dense", ragged_last=True, chunks=2),
    "dense_prefix_reduce_heads": dict(Hq=8, Hkv=2, D=16, Tq=7, B=1, sel="dense", merge="reduce", chunks=2,
                                      chunk_dim="heads"),
}


def _selection(spec, S, ranges, gen) -> list[list[int]]:
    B = spec["B"]
    r0, r1 = (list(range(*ranges[0])), list(range(*ranges[1])))
    kind = spec["sel"]
    if kind == "all":
        return [list(range(S))] * B
    if kind == "none":
        return [[] for _ in range(B)]
    if kind == "rank0":
        return [r0[::2] or r0] * B
    if kind == "rank1":
        return [r1[1:] or r1] * B
    if kind == "mixed_rows":
        rows = [r0[:3], sorted(r0[1:2] + r1[:2]), []]
        return (rows * B)[:B]
    rows = []
    for _ in range(B):
        k = int(torch.randint(1, S + 1, (1,), generator=gen))
        rows.append(sorted(torch.randperm(S, generator=gen)[:k].tolist()))
    return rows


def _run_case(name: str, spec: dict, rank: int, world: int) -> dict:
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))  # the same on every rank
    dtype = getattr(torch, spec.get("dtype", "float32"))
    S, P = spec.get("S", 9), spec.get("P", 4)
    B, Tq, Hq, Hkv, D = spec["B"], spec["Tq"], spec["Hq"], spec["Hkv"], spec["D"]
    q = torch.randn(B, Tq, Hq, D, generator=gen).to(dtype)
    k = torch.randn(S, P, Hkv, D, generator=gen).to(dtype)
    v = torch.randn(S, P, Hkv, D, generator=gen).to(dtype)
    lens = torch.full((S,), P, dtype=torch.int32)
    if spec.get("ragged"):
        lens = torch.randint(0, P + 1, (S,), generator=gen, dtype=torch.int32)
        lens[0] = P
    if spec.get("ragged_last"):
        lens[-1] = P - 1
    # Garbage past slot_lens must never be read.
    for s in range(S):
        k[s, int(lens[s]):] = float("nan")
        v[s, int(lens[s]):] = float("nan")
    if "ranges" in spec:
        ranges = spec["ranges"]
    else:
        sizes = equal_ranges(S, world)
        ranges = ((0, sizes[0]), (sizes[0], S))
    scale = 1.0 / math.sqrt(D)
    softcap = spec.get("softcap")
    kw = dict(merge=spec.get("merge", "gather"), chunks=spec.get("chunks", 1), chunk_dim=spec.get("chunk_dim", "heads"))
    a, b = ranges[rank]
    shard = KVShard(a, b, {0: k[a:b].clone()}, {0: v[a:b].clone()}, lens[a:b].clone(), group=dist.group.WORLD)

    if spec["sel"] == "dense":
        qd = q[0]
        kd, vd = shard.dense_tokens(0)
        out, lse = shard.attend_dense(0, qd, scale, softcap, **kw)
        n = int(lens.sum())
        keys, values = k.reshape(-1, Hkv, D)[:n][None], v.reshape(-1, Hkv, D)[:n][None]
        ref_o, ref_l = dense_attention_reference(qd[None], keys, values, scale, softcap=softcap)
        ref_o, ref_l = ref_o[0], ref_l[0]
        local_tokens = int(kd.shape[0])
    else:
        rows = _selection(spec, S, ranges, gen)
        M = max([1] + [len(r) for r in rows])
        table = torch.zeros(B, M, dtype=torch.int32)
        for i, r in enumerate(rows):
            table[i, : len(r)] = torch.tensor(r, dtype=torch.int32)
        num = torch.tensor([len(r) for r in rows], dtype=torch.int32)
        ref_o, ref_l = attend_selected_reference(q, k, v, table, num, lens, scale, softcap)
        if spec.get("device_table"):
            # Unsorted rows and garbage padding: the device path must keep only real, in-range entries.
            shuffled = table.clone()
            for i, r in enumerate(rows):
                if r:
                    perm = torch.randperm(len(r), generator=gen)
                    shuffled[i, : len(r)] = torch.tensor(r, dtype=torch.int32)[perm]
                shuffled[i, len(r):] = 10_000
            sel = restrict_block_table(shuffled, num, a, b)
            host = local_selection(rows, (a, b), batch=B)
            for i in range(B):
                nd, nh = int(sel.num_blocks[i]), int(host.num_blocks[i])
                assert nd == nh, (nd, nh)
                assert sorted(sel.block_table[i, :nd].tolist()) == host.block_table[i, :nh].tolist()
        else:
            sel = shard.select(rows, batch=B)
        out, lse = sharded_attend(q, shard.k_pages[0], shard.v_pages[0], shard.slot_lens, sel, scale, softcap,
                                  group=dist.group.WORLD, impl="torch", **kw)
        local_tokens = int(sel.num_blocks.sum())

    # Every rank must end with the same result.
    both = [torch.empty_like(out.float()) for _ in range(world)]
    dist.all_gather(both, out.float().contiguous())
    both_l = [torch.empty_like(lse) for _ in range(world)]
    dist.all_gather(both_l, lse.contiguous())
    same = all(torch.equal(both[0], x) for x in both) and all(
        torch.equal(torch.nan_to_num(both_l[0]), torch.nan_to_num(x)) for x in both_l)

    finite = torch.isfinite(ref_l)
    inf_match = bool(torch.equal(torch.isfinite(lse), finite)) and bool((lse[~finite] == float("-inf")).all())
    out_err = float((out.float() - ref_o.float()).abs().max()) if out.numel() else 0.0
    lse_err = float((lse[finite] - ref_l[finite]).abs().max()) if bool(finite.any()) else 0.0
    return {
        "out_err": out_err, "lse_err": lse_err, "inf_match": inf_match, "same_on_ranks": bool(same),
        "nan": bool(torch.isnan(out).any() or torch.isnan(lse).any()), "dtype": str(dtype).split(".")[-1],
        "all_empty": not bool(finite.any()), "zeros_where_empty": bool((out[~finite] == 0).all()),
        "out_shape": list(out.shape), "local_tokens_or_pages": local_tokens,
    }


def run(rank: int, world: int, init: str, out_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    results: dict[str, dict] = {}
    try:
        for name, spec in CASES.items():
            try:
                results[name] = _run_case(name, spec, rank, world)
            except Exception:
                results[name] = {"error": traceback.format_exc()}
                raise  # a rank that fails mid-case would leave its peer waiting in a collective
    finally:
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)
        dist.destroy_process_group()
