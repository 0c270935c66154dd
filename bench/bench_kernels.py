"""Benchmark: Triton selected-page attention vs dense SDPA, one layer, decode.

Run on a CUDA machine (imports only torch, triton, numpy and the `kernels` package):

    python bench/bench_kernels.py                 # default grid, < 4 min on an H200
    python bench/bench_kernels.py --batch 16      # B > 1 decode (agents share one KV)
    python bench/bench_kernels.py --sweep         # also try launch configs on headline cases

What it does
  1. Measures device-to-device copy bandwidth (bytes read + written) with CUDA
     events, median of repeats: the practical HBM roofline used for "% of copy".
  2. Checks the Triton kernel against the float32 reference on small cases
     (bf16, ||out - ref|| / ||ref|| < 1e-2) and, at 100 % selection, against
     SDPA on the full-size case.
  3. For Gemma-3-270M heads (Hq=4, Hkv=1, D=256) and Llama-3-8B heads
     (Hq=32, Hkv=8, D=128), bf16, page 256, KV 32K/128K/1M tokens, selecting
     5/12/100 % of the pages (random, sorted): times Triton `attend_selected`
     against `F.scaled_dot_product_attention` over the full contiguous KV.

Timing: `triton.testing.do_bench` (median; it flushes L2 before every rep) of a
CUDA-graph replay of each call, so Python launch overhead is excluded and KV is
read cold from HBM, as it would be after the other layers ran. The eager time
(including the Python launcher) is reported too.

With --batch B the B decode queries are B agents sharing one document KV. The
dense baseline folds them into SDPA's query-length axis (non-causal), i.e. it
reads the shared KV once: the strongest dense baseline, not B copies.

Writes $OUT/bench_kernels.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import triton  # noqa: E402
import triton.testing  # noqa: E402

from agentctx.kernels import attend_selected  # noqa: E402
from agentctx.kernels.triton_attend import triton_attend_selected  # noqa: E402
from agentctx.kernels.triton_config import TritonConfig, choose_config  # noqa: E402

SHAPES = {
    "gemma3-270m": dict(Hq=4, Hkv=1, D=256),
    "llama3-8b": dict(Hq=32, Hkv=8, D=128),
}
DTYPE = torch.bfloat16
ELEM = 2  # bytes per bf16
DEVICE = "cuda"  # module constant so a CPU smoke run (Triton interpreter) can override it


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ",".join(SHAPES))
    p.add_argument("--lengths", default="32768,131072,1048576", help="KV tokens, comma list")
    p.add_argument("--selections", default="0.05,0.12,1.0", help="fractions of pages selected, comma list")
    p.add_argument("--page-size", type=int, default=256)
    p.add_argument("--batch", type=int, default=1, help="decode batch (agents sharing one KV)")
    p.add_argument("--tq", type=int, default=1, help="query tokens per row (1 = decode)")
    p.add_argument("--rep-ms", type=int, default=100, help="do_bench rep budget per measurement")
    p.add_argument("--sweep", action="store_true", help="also sweep launch configs on headline cases")
    p.add_argument("--no-eager", action="store_true", help="skip the eager (Python launcher) timing")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


# --- measurement helpers --------------------------------------------------------


def copy_bandwidth_gbs(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s counting bytes read + written (median of reps)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / float(np.median(times)) / 1e9


def graphed(fn):
    """Capture fn() in a CUDA graph (after warm-up/compile on a side stream); returns replay or None."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph.replay
    except Exception as exc:  # noqa: BLE001 - report and fall back to eager timing
        print(f"  (CUDA graph capture failed: {type(exc).__name__}: {exc}; timing eagerly)", file=sys.stderr)
        torch.cuda.synchronize()
        return None


def time_ms(fn, rep_ms: int, use_graph: bool = True) -> float:
    """Median ms of fn (as a CUDA-graph replay when possible), L2 flushed before each rep."""
    runner = graphed(fn) if use_graph else None
    if runner is None:
        fn()
        runner = fn
    return float(triton.testing.do_bench(runner, warmup=25, rep=rep_ms, return_mode="median"))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# --- problem construction -------------------------------------------------------


def make_pool(T: int, P: int, Hkv: int, D: int, gen: torch.Generator):
    """Random (S, P, Hkv, D) K/V pools holding T tokens, all pages full."""
    S = T // P
    k = torch.randn(S, P, Hkv, D, device=DEVICE, dtype=DTYPE, generator=gen)
    v = torch.randn(S, P, Hkv, D, device=DEVICE, dtype=DTYPE, generator=gen)
    return k, v, torch.full((S,), P, dtype=torch.int32, device=DEVICE)


def select_pages(S: int, frac: float, B: int, gen: torch.Generator):
    """(B, n) int32 block table of random pages, sorted per row; n = round(frac * S)."""
    n = max(1, min(S, round(frac * S)))
    rows = [torch.sort(torch.randperm(S, device=DEVICE, generator=gen)[:n]).values for _ in range(B)]
    bt = torch.stack(rows).to(torch.int32)
    return bt, torch.full((B,), n, dtype=torch.int32, device=DEVICE)


def dense_sdpa_fn(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, scale: float):
    """Dense SDPA over the full contiguous KV; B agents folded into the query axis (shared KV)."""
    B, Tq, Hq, D = q.shape
    S, P, Hkv, _ = k_pool.shape
    k = k_pool.reshape(S * P, Hkv, D).transpose(0, 1).contiguous()[None]  # (1, Hkv, T, D)
    v = v_pool.reshape(S * P, Hkv, D).transpose(0, 1).contiguous()[None]
    qd = q.reshape(1, B * Tq, Hq, D).transpose(1, 2).contiguous()  # (1, Hq, B*Tq, D)
    try:
        F.scaled_dot_product_attention(qd, k, v, scale=scale, enable_gqa=True)
        how = "enable_gqa"

        def fn():
            return F.scaled_dot_product_attention(qd, k, v, scale=scale, enable_gqa=True)
    except (TypeError, RuntimeError):  # older torch: expand the KV heads
        ke = k.repeat_interleave(Hq // Hkv, dim=1)
        ve = v.repeat_interleave(Hq // Hkv, dim=1)
        how = "expanded"

        def fn():
            return F.scaled_dot_product_attention(qd, ke, ve, scale=scale)

    def as_bthd(o):  # (1, Hq, B*Tq, D) -> (B, Tq, Hq, D)
        return o.transpose(1, 2).reshape(B, Tq, Hq, D)

    return fn, as_bthd, how, (k, v)


def triton_bytes(B, Tq, Hq, Hkv, D, P, n_sel, num_splits) -> int:
    """HBM bytes the Triton path moves: K+V of selected pages, q, out, split partials (write+read)."""
    kv = B * n_sel * P * Hkv * D * 2 * ELEM
    qo = 2 * B * Tq * Hq * D * ELEM
    partial = 0 if num_splits <= 1 else 2 * B * num_splits * Tq * Hq * (D + 1) * 4
    return kv + qo + partial


# --- correctness ----------------------------------------------------------------


def check_small(gen: torch.Generator) -> list[dict]:
    """Triton vs float32 reference on small ragged cases for every shape; bf16 rel err < 1e-2."""
    results = []
    for name, s in SHAPES.items():
        for Tq, B in ((1, 3), (7, 2)):
            S, P = 24, 256
            k = torch.randn(S, P, s["Hkv"], s["D"], device=DEVICE, dtype=DTYPE, generator=gen)
            v = torch.randn(S, P, s["Hkv"], s["D"], device=DEVICE, dtype=DTYPE, generator=gen)
            lens = torch.randint(1, P + 1, (S,), device=DEVICE, generator=gen).to(torch.int32)
            q = torch.randn(B, Tq, s["Hq"], s["D"], device=DEVICE, dtype=DTYPE, generator=gen)
            bt = torch.stack([torch.randperm(S, device=DEVICE, generator=gen)[:10] for _ in range(B)]).to(torch.int32)
            nb = torch.tensor([10, 4, 0][:B], dtype=torch.int32, device=DEVICE)
            scale = s["D"] ** -0.5
            out, lse = attend_selected(q, k, v, bt, nb, lens, scale, impl="triton")
            ref, ref_lse = attend_selected(q, k, v, bt, nb, lens, scale, impl="torch")
            err = rel_err(out, ref)
            lse_ok = bool(torch.equal(torch.isinf(lse), torch.isinf(ref_lse)))
            finite = ~torch.isinf(ref_lse)
            lse_err = float((lse[finite] - ref_lse[finite]).abs().max()) if finite.any() else 0.0
            ok = err < 1e-2 and lse_ok and lse_err < 1e-2 and not torch.isnan(out).any()
            results.append(dict(shape=name, Tq=Tq, B=B, rel_err=err, lse_max_abs_err=lse_err, ok=bool(ok)))
            print(f"check {name:12s} Tq={Tq} B={B}: rel err {err:.2e}, lse err {lse_err:.2e} "
                  f"-> {'OK' if ok else 'FAIL'}")
    return results


# --- main -------------------------------------------------------------------------


def run_case(name, s, T, frac, args, gen, pools, dense_ms_cache, copy_gbs, rows):
    Hq, Hkv, D, P, B, Tq = s["Hq"], s["Hkv"], s["D"], args.page_size, args.batch, args.tq
    k_pool, v_pool, lens = pools
    S = k_pool.shape[0]
    scale = D**-0.5
    q = torch.randn(B, Tq, Hq, D, device=DEVICE, dtype=DTYPE, generator=gen)
    bt, nb = select_pages(S, frac, B, gen)
    n_sel = int(bt.shape[1])
    cfg = choose_config(B, Tq, Hq, Hkv, D, P, n_sel, q.device)

    def tri():
        return attend_selected(q, k_pool, v_pool, bt, nb, lens, scale, impl="triton")

    tri_ms = time_ms(tri, args.rep_ms)
    eager_ms = None if args.no_eager else time_ms(tri, args.rep_ms, use_graph=False)

    key = (name, T)
    if key not in dense_ms_cache:
        fn, as_bthd, how, kv = dense_sdpa_fn(q, k_pool, v_pool, scale)
        dense_ms_cache[key] = (time_ms(fn, args.rep_ms), how)
        del kv
    dense_ms, how = dense_ms_cache[key]

    check = None
    if frac >= 1.0:  # all pages in order: Triton must equal dense SDPA
        fn, as_bthd, _, kv = dense_sdpa_fn(q, k_pool, v_pool, scale)
        bt_all = torch.arange(S, device=DEVICE, dtype=torch.int32)[None].expand(B, S).contiguous()
        out, _ = attend_selected(q, k_pool, v_pool, bt_all, nb, lens, scale, impl="triton")
        check = rel_err(out, as_bthd(fn()))
        del kv

    chunks = n_sel * (-(-P // cfg.block_n))
    splits = -(-chunks // (-(-chunks // cfg.num_splits)))
    nbytes = triton_bytes(B, Tq, Hq, Hkv, D, P, n_sel, splits)
    gbs = nbytes / (tri_ms * 1e-3) / 1e9
    row = dict(shape=name, Hq=Hq, Hkv=Hkv, D=D, kv_tokens=T, batch=B, tq=Tq, selection=frac, pages=n_sel,
               triton_ms=tri_ms, triton_eager_ms=eager_ms, sdpa_dense_ms=dense_ms, sdpa_mode=how,
               speedup=dense_ms / tri_ms, triton_bytes=nbytes, triton_gbs=gbs, pct_copy_bw=100 * gbs / copy_gbs,
               splits=splits, config=repr(cfg), rel_err_vs_sdpa=check)
    rows.append(row)
    eager = f"{eager_ms:.4f}" if eager_ms is not None else "-"
    chk = f"{check:.1e}" if check is not None else "-"
    print(f"| {name} | {T // 1024}K | {100 * frac:g}% | {tri_ms:.4f} | {eager} | {dense_ms:.4f} | "
          f"{dense_ms / tri_ms:.2f}x | {nbytes / 1e6:.1f} MB | {gbs:.0f} | {100 * gbs / copy_gbs:.0f}% | "
          f"{splits} | {chk} |",
          flush=True)
    return q, bt, nb


def sweep(name, s, T, frac, args, gen, pools, copy_gbs) -> list[dict]:
    """Try launch configs on one case; prints and returns them sorted by time."""
    Hq, Hkv, D, P, B, Tq = s["Hq"], s["Hkv"], s["D"], args.page_size, args.batch, args.tq
    k_pool, v_pool, lens = pools
    q = torch.randn(B, Tq, Hq, D, device=DEVICE, dtype=DTYPE, generator=gen)
    bt, nb = select_pages(k_pool.shape[0], frac, B, gen)
    n_sel = int(bt.shape[1])
    base = choose_config(B, Tq, Hq, Hkv, D, P, n_sel, q.device)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for block_n in (32, 64, 128):
        for warps in (4, 8):
            for mult in (2, 4, 8):
                splits = max(1, -(-(mult * n_sm) // (B * Hkv)))
                cfg = TritonConfig(base.block_m, block_n, splits, warps, 3)
                try:
                    ms = time_ms(lambda: triton_attend_selected(q, k_pool, v_pool, bt, nb, lens, D**-0.5, config=cfg),
                                 max(20, args.rep_ms // 2))
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
                    print(f"  sweep {cfg}: failed ({type(exc).__name__})")
                    continue
                chunks = n_sel * (-(-P // block_n))
                eff = -(-chunks // (-(-chunks // splits)))
                gbs = triton_bytes(B, Tq, Hq, Hkv, D, P, n_sel, eff) / (ms * 1e-3) / 1e9
                results.append(dict(shape=name, kv_tokens=T, selection=frac, config=repr(cfg), ms=ms, gbs=gbs,
                                    pct_copy_bw=100 * gbs / copy_gbs))
    results.sort(key=lambda r: r["ms"])
    print(f"\nsweep {name} {T // 1024}K {100 * frac:g}% (heuristic: {base})")
    for r in results[:6]:
        print(f"  {r['ms']:.4f} ms  {r['gbs']:.0f} GB/s ({r['pct_copy_bw']:.0f}%)  {r['config']}")
    return results


def main() -> int:
    args = parse_args()
    if not torch.cuda.is_available():
        print("bench_kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.time()
    gen = torch.Generator(device=DEVICE).manual_seed(args.seed)
    dev = torch.cuda.get_device_properties(0)
    print(f"# device: {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__}, "
          f"triton {triton.__version__}")
    copy_gbs = copy_bandwidth_gbs()
    print(f"# measured D2D copy bandwidth (read + write): {copy_gbs:.0f} GB/s\n")

    checks = check_small(gen)
    all_ok = all(c["ok"] for c in checks)

    shapes = [x for x in args.shapes.split(",") if x]
    lengths = [int(x) for x in args.lengths.split(",") if x]
    fracs = [float(x) for x in args.selections.split(",") if x]
    print(f"\n# bf16, one layer, batch {args.batch}, Tq {args.tq}, page {args.page_size}; times are medians "
          "(CUDA-graph replay, L2 flushed); eager = through the Python launcher")
    print("| shape | KV tokens | selected | triton ms | triton eager ms | SDPA dense ms | speedup | "
          "triton bytes | GB/s | % copy BW | splits | rel err vs SDPA |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows, sweeps, dense_cache = [], [], {}
    for name in shapes:
        s = SHAPES[name]
        for T in lengths:
            pools = make_pool(T, args.page_size, s["Hkv"], s["D"], gen)
            for frac in fracs:
                run_case(name, s, T, frac, args, gen, pools, dense_cache, copy_gbs, rows)
            if args.sweep and T == max(lengths):
                # Headline cases: >= 10 % selections (default 12 % and 100 %) at the longest KV.
                for frac in [f for f in fracs if f >= 0.1] or [max(fracs)]:
                    sweeps += sweep(name, s, T, frac, args, gen, pools, copy_gbs)
            del pools
            torch.cuda.empty_cache()
    for r in rows:
        if r["rel_err_vs_sdpa"] is not None and r["rel_err_vs_sdpa"] >= 1e-2:
            all_ok = False
    elapsed = time.time() - t0
    print(f"\n# correctness: {'all OK' if all_ok else 'FAILURES (see above)'}; elapsed {elapsed:.0f} s")

    out_dir = os.environ.get("OUT")
    if out_dir:
        payload = dict(device=dev.name, sms=dev.multi_processor_count, torch=torch.__version__,
                       triton=triton.__version__, copy_gbs=copy_gbs, args=vars(args), checks=checks, rows=rows,
                       sweeps=sweeps, all_ok=all_ok, elapsed_s=elapsed)
        path = Path(out_dir) / "bench_kernels.json"
        path.write_text(json.dumps(payload, indent=2, default=str))
        print(f"# wrote {path}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
