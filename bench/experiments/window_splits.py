"""The sliding-window band kernel alone, split-K counts side by side (CUDA).

    python bench/experiments/window_splits.py            # Gemma 3 heads (Hq 4, Hkv 1, D 256), W 512, bf16

For a decode step (1 query token) and a prompt (24 tokens) over a [document window | tail]
buffer, times ``kernels.triton_tail.triton_window`` with 1, 2, 4, 8 and 16 programs per row
tile along the band, the launch rule's own choice, and the SDPA band path it replaced. Each
call is captured in a CUDA graph of 20 calls and the replay timed with CUDA events (median of
rounds), so the figure is the kernel time a replayed forward pays, launch gaps included.
Every variant is first checked against the torch path (relative error, bf16 < 1e-2).
The floor beside each row is bytes read (the band's K and V) over the copy bandwidth measured
in the same run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402


def _graph_time_us(fn, calls: int = 20, rounds: int = 15) -> float:
    fn()  # compile / first-call work outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def _copy_bandwidth() -> float:
    """Bytes read + written per second of a 1 GiB device-to-device copy (median of 10)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() / sorted(times)[5]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hq", type=int, default=4)
    ap.add_argument("--hkv", type=int, default=1)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--window", type=int, default=512)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("window_splits.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from agentctx.kernels.tail_merge import attend_window_reference
    from agentctx.kernels.triton_tail import launch_splits, triton_window

    bw = _copy_bandwidth()
    g = torch.Generator(device="cuda").manual_seed(0)
    dt, w, d = torch.bfloat16, args.window, args.dim
    print(f"# window band kernel, Hq {args.hq} / Hkv {args.hkv} x {d}, W {w}, bf16, "
          f"{torch.cuda.get_device_name()}; copy bandwidth {bw / 1e12:.2f} TB/s")
    print("| query tokens | variant | us per call | vs unsplit | floor (us) | rel err vs torch |")
    print("|---:|---|---:|---:|---:|---:|")
    for tq in (1, 24):
        c = w + 64
        q = torch.randn(tq, args.hq, d, generator=g, device="cuda", dtype=dt)
        k = torch.randn(c, args.hkv, d, generator=g, device="cuda", dtype=dt)
        v = torch.randn(c, args.hkv, d, generator=g, device="cuda", dtype=dt)
        slots = torch.arange(3, 3 + tq, device="cuda")
        scale = d**-0.5
        call = (q, k, v, slots, w, w, scale, None)
        want = attend_window_reference(*call).float()
        floor_us = (w + tq) * args.hkv * d * 2 * 2 / bw * 1e6
        auto = launch_splits(q, k, w)
        variants = [(f"splits {s}", s) for s in (1, 2, 4, 8, 16)] + [(f"auto ({auto})", None)]
        base = None
        for label, splits in variants:
            got = triton_window(*call, num_splits=splits).float()
            rel = ((got - want).norm() / want.norm()).item()
            t = _graph_time_us(lambda s=splits: triton_window(*call, num_splits=s))
            base = base or t
            print(f"| {tq} | {label} | {t:.1f} | {base / t:.2f}x | {floor_us:.2f} | {rel:.1e} |")
        t = _graph_time_us(lambda: attend_window_reference(*call))
        print(f"| {tq} | SDPA band (torch path) | {t:.1f} | {base / t:.2f}x | {floor_us:.2f} | - |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
