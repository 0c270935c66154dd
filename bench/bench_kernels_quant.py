"""Benchmark: the page kernel over fp8 / int8 KV pages beside bf16, one layer, decode.

Run on a CUDA machine (imports only torch, triton, numpy and the `kernels` package):

    python bench/bench_kernels_quant.py                       # ~1-2 min on an H100/H200
    python bench/bench_kernels_quant.py --kv-dtypes bf16,fp8 --lengths 131072

For Gemma-3-270M heads (Hq=4, Hkv=1, D=256) and Llama-3-8B heads (Hq=32, Hkv=8, D=128), page
256, 128K and 1M tokens, 12 % of the pages selected (random, sorted): times
``attend_selected(impl="triton")`` over the bf16 pool and ``attend_selected_quant(impl="triton")``
over the same pool quantised by ``kernels.kv_quant.quantize_pages`` with the default scale
granularities, in the same run. Each quantised dtype is timed with the bf16 launch heuristics
("default") and a few launch variants, since the dequantising loop needs more registers
(``--variants``). Times as in bench_kernels.py: median of ``triton.testing.do_bench`` (L2 flushed
before each rep) of a CUDA-graph replay. "vs bf16" is bf16 time / this time (> 1: faster).
"rel err" is ||out - out_bf16|| / ||out_bf16|| against the bf16 kernel (Gaussian K/V: expect
~3 % fp8, ~1 % int8); above 8 % the run reports a failure.

Writes $OUT/bench_kernels_quant.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import triton  # noqa: E402

import bench.bench_kernels as bk  # noqa: E402
from agentctx.kernels import attend_selected  # noqa: E402
from agentctx.kernels.attend_selected import attend_selected_quant  # noqa: E402
from agentctx.kernels.kv_quant import quantize_pages  # noqa: E402
from agentctx.kernels.triton_attend_quant import triton_attend_selected_quant  # noqa: E402
from agentctx.kernels.triton_config import choose_config  # noqa: E402

VARIANTS = {  # name -> choose_config overrides (on top of the bf16 heuristics)
    "default": {},
    "float-rule": {},  # the bf16 heuristics as they are (the quantised default's rule before 2026-12-07)
    "warps8": dict(num_warps=8),
    "warps8-bn2x": dict(num_warps=8, block_n="2x"),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(bk.SHAPES), help="comma list of " + ",".join(bk.SHAPES))
    p.add_argument("--lengths", default="131072,1048576", help="KV tokens, comma list")
    p.add_argument("--selection", type=float, default=0.12, help="fraction of pages selected")
    p.add_argument("--kv-dtypes", default="bf16,fp8,int8", help="comma list of bf16, fp8, int8")
    p.add_argument("--variants", default=",".join(VARIANTS), help="launch variants for fp8/int8: " + ",".join(VARIANTS))
    p.add_argument("--page-size", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tq", type=int, default=1)
    p.add_argument("--rep-ms", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def kv_bytes(pages, slots: int) -> int:
    """Bytes of `slots` selected slots of a pool (bf16 tensor or QuantPages)."""
    if isinstance(pages, torch.Tensor):
        return slots * pages[0].numel() * pages.element_size()
    per_slot = pages.data[0].numel() * pages.data.element_size() + pages.scale[0].numel() * 4
    return slots * per_slot


def variant_config(name: str, q, k_shape, M: int):
    over = dict(VARIANTS[name])
    B, Tq, Hq, D = q.shape
    S, P, Hkv, _ = k_shape
    base = choose_config(B, Tq, Hq, Hkv, D, P, M, q.device)
    if over.get("block_n") == "2x":
        over["block_n"] = min(2 * base.block_n, P)
    return choose_config(B, Tq, Hq, Hkv, D, P, M, q.device, **over)


def main() -> int:
    args = parse_args()
    if not torch.cuda.is_available():
        print("bench_kernels_quant.py needs a CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.time()
    gen = torch.Generator(device=bk.DEVICE).manual_seed(args.seed)
    dev = torch.cuda.get_device_properties(0)
    print(f"# device: {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__}, "
          f"triton {triton.__version__}")
    copy_gbs = bk.copy_bandwidth_gbs()
    print(f"# measured D2D copy bandwidth (read + write): {copy_gbs:.0f} GB/s")
    kv_dtypes = [x for x in args.kv_dtypes.split(",") if x]
    variants = [x for x in args.variants.split(",") if x]
    P, B, Tq = args.page_size, args.batch, args.tq
    print(f"\n# one layer, batch {B}, Tq {Tq}, page {P}, {100 * args.selection:g}% of pages; median ms of a "
          "CUDA-graph replay, L2 flushed")
    print("| shape | KV tokens | kv dtype | variant | ms | vs bf16 | KV bytes read | GB/s | % copy BW | rel err "
          "| config |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    rows, all_ok = [], True
    for name in [x for x in args.shapes.split(",") if x]:
        s = bk.SHAPES[name]
        Hq, Hkv, D = s["Hq"], s["Hkv"], s["D"]
        for T in [int(x) for x in args.lengths.split(",") if x]:
            k, v, lens = bk.make_pool(T, P, Hkv, D, gen)
            q = torch.randn(B, Tq, Hq, D, device=bk.DEVICE, dtype=torch.bfloat16, generator=gen)
            bt, nb = bk.select_pages(k.shape[0], args.selection, B, gen)
            n_sel = int(bt.shape[1])
            scale = D**-0.5
            ref = attend_selected(q, k, v, bt, nb, lens, scale, impl="triton")[0]
            base_ms = None
            for kvd in kv_dtypes:
                if kvd == "bf16":
                    k_p, v_p, runs = k, v, [("default", None)]
                else:
                    k_p = quantize_pages(k, kvd, part="k")
                    v_p = quantize_pages(v, kvd, part="v")
                    # "default" goes through the public launcher; the variants pass a config.
                    runs = [(vn, None if vn == "default" else variant_config(vn, q, k.shape, n_sel))
                            for vn in variants]
                for vname, cfg in runs:
                    call = (q, k_p, v_p, bt, nb, lens, scale)
                    if kvd == "bf16":
                        fn = functools.partial(attend_selected, *call, impl="triton")
                    elif cfg is None:
                        fn = functools.partial(attend_selected_quant, *call, impl="triton")
                    else:
                        fn = functools.partial(triton_attend_selected_quant, *call, config=cfg)
                    try:
                        ms = bk.time_ms(fn, args.rep_ms)
                    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory for a variant
                        print(f"| {name} | {T // 1024}K | {kvd} | {vname} | failed: {type(exc).__name__} |")
                        continue
                    err = bk.rel_err(fn()[0], ref)
                    ok = err < (1e-6 if kvd == "bf16" else 0.08) and not torch.isnan(fn()[0]).any()
                    all_ok &= bool(ok)
                    if kvd == "bf16":
                        base_ms = ms
                    nbytes = B * (kv_bytes(k_p, n_sel) + kv_bytes(v_p, n_sel))
                    gbs = nbytes / (ms * 1e-3) / 1e9
                    ratio = base_ms / ms if base_ms else float("nan")
                    cfg_s = repr(cfg or choose_config(B, Tq, Hq, Hkv, D, P, n_sel, q.device))
                    rows.append(dict(shape=name, kv_tokens=T, kv_dtype=kvd, variant=vname, ms=ms, vs_bf16=ratio,
                                     kv_bytes=nbytes, gbs=gbs, pct_copy_bw=100 * gbs / copy_gbs, rel_err=err,
                                     ok=bool(ok), config=cfg_s, pages=n_sel))
                    print(f"| {name} | {T // 1024}K | {kvd} | {vname} | {ms:.4f} | {ratio:.2f}x | "
                          f"{nbytes / 1e6:.1f} MB | {gbs:.0f} | {100 * gbs / copy_gbs:.0f}% | {err:.1e}"
                          f"{'' if ok else ' FAIL'} | {cfg_s} |", flush=True)
                k_p = v_p = fn = None  # free the quantised pools before the next dtype
            k = v = ref = None
            torch.cuda.empty_cache()
    elapsed = time.time() - t0
    print(f"\n# correctness: {'all OK' if all_ok else 'FAILURES (see above)'}; elapsed {elapsed:.0f} s")
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "bench_kernels_quant.json"
        path.write_text(json.dumps(dict(device=dev.name, sms=dev.multi_processor_count, torch=torch.__version__,
                                        triton=triton.__version__, copy_gbs=copy_gbs, args=vars(args), rows=rows,
                                        all_ok=all_ok, elapsed_s=elapsed), indent=2, default=str))
        print(f"# wrote {path}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
