"""Benchmark: one context's KV sharded by sequence over 1, 2, 4 GPUs (NCCL).

Run on a CUDA machine (imports only torch, the `kernels` package and the
torch-only `serving.sharding.plan` / `serving.sharding.attention` modules; no Ray):

    python bench/bench_sharded.py --gpus 1            # the single-GPU machine
    python bench/bench_sharded.py --gpus 1,2,4        # 2/4 reported "blocked" if absent
    python bench/bench_sharded.py --cpu-smoke         # tiny shapes, gloo, 2 CPU processes

What it measures, for Llama-3-8B attention shapes (32 global layers, Hq=32,
Hkv=8, D=128, bf16, page 256) and 1M / 4M tokens of document KV:

* decode: one token (B=1, Tq=1) through all 32 layers' attention over the
  selected pages (default 100 % and 12 %), per-token latency, with the
  cross-GPU merge issued per layer (``--chunks 1``: one all-gather after the
  layer's attention; ``--chunks 4``: four KV-head groups, the all-gather of
  group i overlapping the attention of group i+1). Also the same work with no
  merge at all ("local"), which is the compute-only floor; the difference is
  what the merge costs.
* prefill attention: a chunk of ``--prefill-q`` query tokens attending to all
  KV tokens (the dense flash path each layer of a chunked prefill uses for the
  earlier pages), per layer, as query tokens/s and TFLOP/s, merge chunked
  along query tokens.
* scaling: strong scaling vs 1 GPU at equal context (t1 / (G * tG)), and weak
  scaling (same KV per GPU: 1 GPU at N/G tokens vs G GPUs at N tokens) where
  both runs exist.

One process per GPU (torch.multiprocessing spawn), NCCL process group,
``NCCL_NVLS_ENABLE=0`` set before anything starts. Placement uses
``serving.sharding.plan.plan_placement`` with each GPU's free memory and the
``nvidia-smi topo -m`` link costs. A size whose per-GPU share does not fit
(4M tokens of Llama-8B KV = 512 GiB, i.e. 128 GiB per GPU on 4 GPUs) is
skipped with the reason printed. GPU counts above what the machine has are
reported as "blocked".

Timing: per iteration, every rank syncs, barriers, runs one step and syncs
again; the step time is the max over ranks; the median over iterations is
reported. Eager PyTorch (no CUDA graphs): Python launch overhead is included,
which is what the serving path pays today.

Writes $OUT/bench_sharded.json when $OUT is set (and --json PATH if given).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before torch / NCCL start: NVLink multicast stays off

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentctx.kernels import attend_selected  # noqa: E402
from agentctx.serving.sharding.attention import KVShard  # noqa: E402
from agentctx.serving.sharding.plan import WorkerInfo, kv_page_bytes, plan_placement  # noqa: E402
from agentctx.serving.sharding.topology import topology_costs  # noqa: E402

GiB = 1 << 30
LLAMA8B = dict(layers=32, Hq=32, Hkv=8, D=128)
SMOKE = dict(layers=2, Hq=8, Hkv=2, D=32)


def parse_tokens(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_tokens(n: int) -> str:
    for unit, v in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v}{unit}"
    return str(n)


# --------------------------------------------------------------------------- per rank
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step, device, iters: int, warmup: int) -> float:
    """Median over iterations of the max-over-ranks step time, in ms."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        _sync(device)
        dist.barrier()
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    t = torch.tensor(times, dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.cpu().tolist()) * 1e3


def _plan_or_reason(num_pages, page_bytes, world, device, cfg):
    """Rank 0 plans from every rank's free memory; everyone gets (plan, None) or (None, reason)."""
    if device.type == "cuda":
        free = int(torch.cuda.mem_get_info(device)[0])
    else:
        free = None
    if cfg["mem_limit_gib"] is not None:
        lim = int(cfg["mem_limit_gib"] * GiB)
        free = lim if free is None else min(free, lim)
    infos = [None] * world
    dist.all_gather_object(infos, (device.index if device.type == "cuda" else None, free))
    box = [None, None]
    if dist.get_rank() == 0:
        workers = [WorkerInfo(rank=r, device=d, free_bytes=f) for r, (d, f) in enumerate(infos)]
        costs = topology_costs() if device.type == "cuda" and world > 1 else None
        reserve = int(cfg["reserve_gib"] * GiB) if free is not None else 0
        try:
            box[0] = plan_placement(num_pages, workers, page_bytes, link_costs=costs, reserve_bytes=reserve)
        except ValueError as exc:
            box[1] = str(exc)
    dist.broadcast_object_list(box, src=0)
    return box[0], box[1]


def _rank_main(rank: int, world: int, cfg: dict, init: str, result_path: str) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    smoke = cfg["cpu_smoke"]
    if smoke:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    else:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world, device_id=device)
    try:
        res = _run_sizes(rank, world, cfg, device)
        if rank == 0:
            Path(result_path).write_text(json.dumps(res))
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def _run_sizes(rank, world, cfg, device) -> dict:
    shape = SMOKE if cfg["cpu_smoke"] else LLAMA8B
    layers, Hq, Hkv, D = shape["layers"], shape["Hq"], shape["Hkv"], shape["D"]
    if cfg["layers"]:
        layers = cfg["layers"]
    P = cfg["page"]
    dtype = getattr(torch, cfg["dtype"])
    scale = 1.0 / math.sqrt(D)
    impl = cfg["impl"] or ("torch" if device.type == "cpu" else "triton")
    page_bytes = kv_page_bytes(layers, P, Hkv, D, dtype)
    out = {"world": world, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "shape": dict(layers=layers, Hq=Hq, Hkv=Hkv, D=D, page=P, dtype=cfg["dtype"]), "impl": impl,
           "merge": cfg["merge"], "sizes": []}
    for tokens in cfg["tokens"]:
        num_pages = -(-tokens // P)
        entry = {"tokens": tokens, "label": fmt_tokens(tokens), "kv_gib_total": num_pages * page_bytes / GiB,
                 "kv_gib_per_gpu": num_pages * page_bytes / GiB / world}
        plan, why = _plan_or_reason(num_pages, page_bytes, world, device, cfg)
        if plan is None:
            entry["skipped"] = why
            if rank == 0:
                print(f"[{world} GPU] {entry['label']} tokens: SKIPPED: {why}", flush=True)
            out["sizes"].append(entry)
            continue
        entry["plan"] = {"ranges": plan.ranges, "chain": plan.chain, "reason": plan.reason}
        s0, s1 = plan.ranges[rank]
        gen = torch.Generator(device=device).manual_seed(1234 + rank)
        shard_shape = (s1 - s0, P, Hkv, D)
        kp = {l: torch.empty(shard_shape, dtype=dtype, device=device).normal_(generator=gen) for l in range(layers)}
        vp = {l: torch.empty(shard_shape, dtype=dtype, device=device).normal_(generator=gen) for l in range(layers)}
        lens = torch.full((s1 - s0,), P, dtype=torch.int32, device=device)
        if s1 > s0 and tokens % P:
            if s1 == num_pages:
                lens[-1] = tokens - (num_pages - 1) * P
        shard = KVShard(s0, s1, kp, vp, lens, group=dist.group.WORLD)
        # Identical queries and selections on every rank (same seed), as after a replicated layer.
        qgen = torch.Generator(device="cpu").manual_seed(7)
        entry["decode"] = []
        for frac in cfg["select"]:
            if frac >= 1.0:
                pages = list(range(num_pages))
            else:
                k = max(1, round(frac * num_pages))
                pages = sorted(torch.randperm(num_pages, generator=qgen)[:k].tolist())
            qs = [torch.randn(1, 1, Hq, D, generator=qgen).to(device, dtype) for _ in range(layers)]
            row = {"select_frac": frac, "pages": len(pages), "local_pages": sum(s0 <= p < s1 for p in pages)}

            def local_step():
                sel = shard.select(pages, batch=1)
                for l in range(layers):
                    if sel.total:
                        attend_selected(qs[l], kp[l], vp[l], sel.block_table, sel.num_blocks, lens, scale, impl=impl)

            row["local_ms"] = _timed(local_step, device, cfg["iters"], cfg["warmup"])
            for c in cfg["chunks"]:
                def step(c=c):
                    sel = shard.select(pages, batch=1)
                    for l in range(layers):
                        shard.attend(l, qs[l], sel, scale, impl=impl, merge=cfg["merge"], chunks=c,
                                     chunk_dim="heads")

                row[f"chunks{c}_ms"] = _timed(step, device, cfg["iters"], cfg["warmup"])
            best = min(row[f"chunks{c}_ms"] for c in cfg["chunks"])
            row["best_ms"] = best
            row["merge_overhead_ms"] = best - row["local_ms"]
            kv_read = row["pages"] * page_bytes / world  # per GPU, all layers
            row["per_gpu_kv_GBps"] = kv_read / (best * 1e-3) / 1e9
            entry["decode"].append(row)
            if rank == 0:
                cols = "  ".join(f"chunks={c}: {row[f'chunks{c}_ms']:.3f} ms" for c in cfg["chunks"])
                print(f"[{world} GPU] {entry['label']} decode sel={frac:.0%} ({row['pages']} pages): "
                      f"local {row['local_ms']:.3f} ms  {cols}  ({row['per_gpu_kv_GBps']:.0f} GB/s/GPU)", flush=True)
        # Prefill attention: a chunk of Tq queries over every KV token, one layer at a time.
        Tq = cfg["prefill_q"]
        if Tq > 0:
            pl = min(layers, cfg["prefill_layers"])
            qp = [torch.randn(Tq, Hq, D, generator=qgen).to(device, dtype) for _ in range(pl)]
            prow = {"q_tokens": Tq, "layers_timed": pl}

            def pstep(c):
                for l in range(pl):
                    shard.attend_dense(l, qp[l], scale, merge=cfg["merge"], chunks=c, chunk_dim="tokens")

            for c in cfg["chunks"]:
                prow[f"chunks{c}_ms_per_layer"] = _timed(lambda c=c: pstep(c), device, cfg["prefill_iters"], 1) / pl
            ms = min(prow[f"chunks{c}_ms_per_layer"] for c in cfg["chunks"])
            flops = 4.0 * Tq * tokens * Hq * D
            prow["best_ms_per_layer"] = ms
            prow["q_tokens_per_s_per_layer"] = Tq / (ms * 1e-3)
            prow["q_tokens_per_s_all_layers"] = Tq / (ms * 1e-3 * layers)
            prow["tflops"] = flops / (ms * 1e-3) / 1e12
            prow["tflops_per_gpu"] = prow["tflops"] / world
            entry["prefill"] = prow
            if rank == 0:
                print(f"[{world} GPU] {entry['label']} prefill-attn Tq={Tq}: {ms:.2f} ms/layer, "
                      f"{prow['q_tokens_per_s_all_layers']:.0f} q-tok/s over {layers} layers, "
                      f"{prow['tflops']:.0f} TFLOP/s ({prow['tflops_per_gpu']:.0f}/GPU)", flush=True)
            del qp
        out["sizes"].append(entry)
        shard = kp = vp = None  # drop this size's KV (closures above share these cells)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------- driver
def run_group(world: int, cfg: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/pg_init"
        result = os.path.join(tmp, "result.json")
        mp.start_processes(_rank_main, args=(world, cfg, init, result), nprocs=world, join=True,
                           start_method="spawn")
        return json.loads(Path(result).read_text())


def scaling(results: dict[int, dict]) -> list[dict]:
    """Strong (same tokens) and weak (same tokens per GPU) scaling vs 1 GPU, where both ran."""
    def decode_ms(world, tokens, frac):
        r = results.get(world)
        if not r or "sizes" not in r:
            return None
        for e in r["sizes"]:
            if e["tokens"] == tokens and "decode" in e:
                for d in e["decode"]:
                    if d["select_frac"] == frac:
                        return d["best_ms"]
        return None

    def prefill_ms(world, tokens):
        r = results.get(world)
        for e in (r or {}).get("sizes", []):
            if e["tokens"] == tokens and "prefill" in e:
                return e["prefill"]["best_ms_per_layer"] / tokens  # per KV token: comparable across sizes
        return None

    rows = []
    worlds = sorted(w for w, r in results.items() if "sizes" in r)
    for w in worlds:
        for e in results[w]["sizes"]:
            if "decode" not in e:
                continue
            n = e["tokens"]
            for d in e["decode"]:
                f = d["select_frac"]
                t1 = decode_ms(1, n, f)
                t1w = decode_ms(1, n // w, f)
                rows.append({
                    "gpus": w, "tokens": fmt_tokens(n), "what": f"decode sel={f:.0%}", "ms": d["best_ms"],
                    "strong_eff": (t1 / (w * d["best_ms"])) if t1 else None,
                    "weak_eff": (t1w / d["best_ms"]) if t1w else None,
                })
            if "prefill" in e:
                p1 = prefill_ms(1, n)
                p1w = prefill_ms(1, n // w)
                pw = e["prefill"]["best_ms_per_layer"] / n
                rows.append({
                    "gpus": w, "tokens": fmt_tokens(n), "what": "prefill-attn / layer",
                    "ms": e["prefill"]["best_ms_per_layer"],
                    "strong_eff": (p1 / (w * pw)) if p1 else None,
                    "weak_eff": (p1w / (w * pw)) if p1w else None,  # per-token time, normalised by GPUs
                })
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1,2,4", help="comma list of GPU counts (default 1,2,4)")
    ap.add_argument("--tokens", default=None, help="comma list of KV sizes, e.g. 1M,4M (default 1M,4M)")
    ap.add_argument("--select", default="1.0,0.12", help="decode page-selection fractions")
    ap.add_argument("--chunks", default="1,4", help="overlap chunk counts to compare (1 = no overlap)")
    ap.add_argument("--merge", default="gather", choices=("gather", "reduce"))
    ap.add_argument("--impl", default=None, help="attend_selected impl (default triton on GPU, torch on CPU)")
    ap.add_argument("--layers", type=int, default=None, help="override the number of layers")
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prefill-q", type=int, default=1024, help="query tokens of the prefill chunk (0 = skip)")
    ap.add_argument("--prefill-layers", type=int, default=2, help="layers timed for prefill attention")
    ap.add_argument("--prefill-iters", type=int, default=3)
    ap.add_argument("--reserve-gib", type=float, default=4.0, help="per-GPU memory left free")
    ap.add_argument("--mem-limit-gib", type=float, default=None, help="pretend each worker has at most this much")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU with gloo (checks the code path)")
    ap.add_argument("--smoke-workers", type=int, default=2, help="CPU processes available to --cpu-smoke")
    ap.add_argument("--json", default=None, help="also write results here")
    a = ap.parse_args(argv)

    gpus = [int(x) for x in a.gpus.split(",") if x.strip()]
    tokens_default = "8K,32K" if a.cpu_smoke else "1M,4M"
    cfg = {
        "cpu_smoke": a.cpu_smoke,
        "tokens": [parse_tokens(x) for x in (a.tokens or tokens_default).split(",") if x.strip()],
        "select": [float(x) for x in a.select.split(",") if x.strip()],
        "chunks": [int(x) for x in a.chunks.split(",") if x.strip()],
        "merge": a.merge, "impl": a.impl, "layers": a.layers, "page": a.page, "dtype": a.dtype,
        "iters": a.iters, "warmup": a.warmup, "prefill_q": a.prefill_q, "prefill_layers": a.prefill_layers,
        "prefill_iters": a.prefill_iters, "reserve_gib": a.reserve_gib, "mem_limit_gib": a.mem_limit_gib,
    }
    available = a.smoke_workers if a.cpu_smoke else torch.cuda.device_count()
    print(f"bench_sharded: gpus={gpus} available={available}{' (cpu-smoke)' if a.cpu_smoke else ''} "
          f"tokens={[fmt_tokens(t) for t in cfg['tokens']]} NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}",
          flush=True)
    results: dict[int, dict] = {}
    for g in gpus:
        if g > available:
            why = f"blocked: needs {g} {'workers' if a.cpu_smoke else 'GPUs'}, this machine has {available}"
            print(f"[{g} GPU] {why}", flush=True)
            results[g] = {"world": g, "blocked": why}
            continue
        t0 = time.perf_counter()
        results[g] = run_group(g, cfg)
        results[g]["wall_s"] = time.perf_counter() - t0
    table = scaling(results)
    if table:
        print("\nscaling (eff = efficiency; strong: same context vs 1 GPU; weak: same KV per GPU vs 1 GPU)")
        print(f"{'gpus':>4} {'tokens':>6} {'what':<22} {'ms':>10} {'strong':>7} {'weak':>7}")
        for r in table:
            se = f"{r['strong_eff']:.2f}" if r["strong_eff"] is not None else "n/a"
            we = f"{r['weak_eff']:.2f}" if r["weak_eff"] is not None else "n/a"
            print(f"{r['gpus']:>4} {r['tokens']:>6} {r['what']:<22} {r['ms']:>10.3f} {se:>7} {we:>7}")
    doc = {"config": cfg, "results": {str(k): v for k, v in results.items()}, "scaling": table}
    out_dir = os.environ.get("OUT")
    paths = [p for p in (a.json, os.path.join(out_dir, "bench_sharded.json") if out_dir else None) if p]
    for p in paths:
        Path(p).write_text(json.dumps(doc, indent=1))
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
