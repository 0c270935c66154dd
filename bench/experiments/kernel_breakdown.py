"""Where the fixed ~14 us of a small ``attend_selected`` call goes (docs/KERNELS.md).

    python bench/experiments/kernel_breakdown.py

Times, as CUDA-graph replays with the L2 flushed before each rep (bench_kernels.time_ms):
the whole call; the page kernel alone (merge launch skipped: output not valid); the merge
kernel alone over the same partials; and an empty Triton kernel, once and twice in a graph
(the launch floor). Cases: small selections where the fixed cost dominates.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from agentctx.kernels import triton_attend as ta  # noqa: E402
from bench.bench_kernels import SHAPES, make_pool, select_pages, time_ms  # noqa: E402

CASES = [("gemma3-270m", 32768, 0.05), ("gemma3-270m", 131072, 0.12), ("llama3-8b", 32768, 0.12),
         ("llama3-8b", 131072, 0.12)]


@triton.jit
def _empty_kernel(X):
    tl.store(X + tl.program_id(0), 1.0)


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *a, **k: None


def main() -> int:
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.zeros(1024, device="cuda")
    one = time_ms(lambda: _empty_kernel[(1,)](x), 100)
    two = time_ms(lambda: (_empty_kernel[(1,)](x), _empty_kernel[(1,)](x)), 100)
    many = time_ms(lambda: _empty_kernel[(528,)](x), 100)
    print(f"empty kernel: 1 launch {1e3 * one:.1f} us, 2 launches {1e3 * two:.1f} us, 528 programs {1e3 * many:.1f} us")
    print("| case | whole call us | page kernel only us | merge only us | splits |")
    print("|---|---:|---:|---:|---:|")
    for name, T, frac in CASES:
        s = SHAPES[name]
        Hq, Hkv, D, P = s["Hq"], s["Hkv"], s["D"], 256
        k, v, lens = make_pool(T, P, Hkv, D, gen)
        q = torch.randn(1, 1, Hq, D, device="cuda", dtype=k.dtype, generator=gen)
        bt, nb = select_pages(k.shape[0], frac, 1, gen)
        scale = D**-0.5
        call = partial(ta.triton_attend_selected, q, k, v, bt, nb, lens, scale)  # binds k, v now
        whole = time_ms(call, 100)
        cfg = ta.choose_config(1, 1, Hq, Hkv, D, P, int(bt.shape[1]), q.device)
        real = ta._merge_splits_kernel
        ta._merge_splits_kernel = _NoLaunch()
        try:
            pages_only = time_ms(call, 100)
        finally:
            ta._merge_splits_kernel = real
        chunks = int(bt.shape[1]) * (-(-P // cfg.block_n))
        splits = -(-chunks // (-(-chunks // cfg.num_splits)))
        op = torch.randn(1, splits, 1, Hq, D, device="cuda")
        lsep = torch.randn(1, splits, 1, Hq, device="cuda")
        out = torch.empty(1, 1, Hq, D, device="cuda", dtype=q.dtype)
        lse = torch.empty(1, 1, Hq, device="cuda")
        block_dr, block_s = min(triton.next_power_of_2(D), 64), min(64, triton.next_power_of_2(splits))

        def merge():
            ta._merge_splits_kernel[(Hq, -(-D // block_dr))](
                op, lsep, out, lse, out.stride(0), out.stride(1), out.stride(2),
                lse.stride(0), lse.stride(1), lse.stride(2), 1, splits,
                HQ=Hq, D=D, BLOCK_DR=block_dr, BLOCK_S=block_s, num_warps=4 if block_s * block_dr >= 2048 else 2)

        merge_only = time_ms(merge, 100)
        print(f"| {name} {T // 1024}K {100 * frac:g}% | {1e3 * whole:.1f} | {1e3 * pages_only:.1f} | "
              f"{1e3 * merge_only:.1f} | {splits} |", flush=True)
        del k, v
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
