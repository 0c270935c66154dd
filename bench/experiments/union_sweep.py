"""Launch settings of the union page kernel against the copy bandwidth, and the row-by-row page kernel
beside it (one layer, bf16, random pages and plans; CUDA only).

    python bench/experiments/union_sweep.py [--pages 4096] [--rows 16] [--budget 0.12] [--heads 4,1,256]

Prints, per setting, the kernel's time (median of triton.testing.do_bench), the bytes it must read
(each union page's K and V once) over that time, and the same for attend_selected with one block
table per row (each row's pages).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--budget", type=float, default=0.12)
    ap.add_argument("--heads", default="4,1,256", help="Hq,Hkv,D")
    ap.add_argument("--kv-dtype", default="bf16", choices=("bf16", "fp8", "int8"),
                    help="pages as stored: bf16, or quantised with the default scales (kernels/kv_quant.py)")
    args = ap.parse_args()
    import triton.testing

    from agentctx.kernels import attend_selected
    from agentctx.kernels.triton_union import triton_attend_union
    from agentctx.kernels.union_attend import union_tables

    hq, hkv, d = (int(x) for x in args.heads.split(","))
    dev, p = torch.device("cuda"), 256
    k = torch.randn(args.pages, p, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    page_bytes = 2 * p * hkv * d * 2
    if args.kv_dtype != "bf16":
        from agentctx.kernels.kv_quant import quantize_pages

        k, v = quantize_pages(k, args.kv_dtype, part="k"), quantize_pages(v, args.kv_dtype, part="v")
        page_bytes = (k.data[0].numel() + k.scale[0].numel() * 4) * 2  # values and scales, K and V
    q = torch.randn(args.rows, hq, d, device=dev, dtype=torch.bfloat16)
    lens = torch.full((args.pages,), p, dtype=torch.int32, device=dev)
    rng = random.Random(0)
    n_sel = max(1, round(args.budget * args.pages))
    plans = [tuple(sorted(rng.sample(range(args.pages), n_sel))) for _ in range(args.rows)]
    union, bits = union_tables(plans, args.pages)
    u = torch.tensor(union + [0] * (args.pages - len(union)), dtype=torch.int32, device=dev)
    b = torch.tensor(bits + [0] * (args.pages - len(union)), device=dev)
    n = torch.tensor([len(union)], dtype=torch.int32, device=dev)
    src = torch.empty(1 << 29, dtype=torch.float16, device=dev)
    dst = torch.empty_like(src)
    copy_s = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") / 1e3
    bw = 2 * src.numel() * 2 / copy_s
    print(f"{args.kv_dtype} pages, {args.rows} rows x {n_sel} of {args.pages} pages, heads {hq}/{hkv}x{d}: "
          f"union {len(union)} pages "
          f"({len(union) / args.pages:.0%}); copy bandwidth {bw / 1e12:.2f} TB/s")
    want = None
    for bn in (32, 64):
        for warps in (4, 8):
            for stages in (2, 3, 4):
                def run():
                    return triton_attend_union(q, k, v, u, n, b, lens, d**-0.5, None, block_n=bn, num_warps=warps,
                                               num_stages=stages)
                try:
                    out = run()[0]
                    ms = triton.testing.do_bench(run, return_mode="median")
                except Exception as exc:  # noqa: BLE001 - a setting that does not compile is reported
                    print(f"  block_n {bn} warps {warps} stages {stages}: {type(exc).__name__}")
                    continue
                if want is None:
                    want = out
                err = ((out.float() - want.float()).norm() / want.float().norm()).item()
                gbps = len(union) * page_bytes / (ms / 1e3) / 1e9
                print(f"  block_n {bn:2d} warps {warps} stages {stages}: {1e3 * ms:7.1f} us, {gbps:6.0f} GB/s "
                      f"({gbps * 1e9 / bw:.0%} of copy), rel diff {err:.1e}")
    if args.kv_dtype != "bf16":
        return
    bt = torch.tensor(plans, dtype=torch.int32, device=dev)
    nb = torch.full((args.rows,), n_sel, dtype=torch.int32, device=dev)
    ms = triton.testing.do_bench(lambda: attend_selected(q.unsqueeze(1), k, v, bt, nb, lens, d**-0.5),
                                 return_mode="median")
    gbps = args.rows * n_sel * page_bytes / (ms / 1e3) / 1e9
    print(f"  row by row (attend_selected): {1e3 * ms:7.1f} us, {gbps:6.0f} GB/s of the rows' reads")


if __name__ == "__main__":
    main()
