"""Where a decode step of many agents goes on a GPU: wall time, GPU busy time and the top kernels.

    python bench/experiments/profile_engine_step.py [--tokens 1048576] [--agents 16] [--budget 0.12]

Runs bench/bench_scheduler.py's agents case once to warm (graphs captured), then once under
torch.profiler, and prints per decode step: wall time, the loop's own time (schedule, forward
launch, sampling, postprocess), GPU busy time (kernel time summed), kernel count, host-side
synchronising calls, and the kernels that take the most GPU time.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m-random")
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--budget", default="0.12")
    ap.add_argument("--peer", default="union")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--kv-dtype", default="bf16", help="bf16 | fp8_e4m3 | int8 (bench_scheduler's --kv-dtype)")
    args = ap.parse_args()
    from bench.bench_scheduler import Bench

    b = Bench(argparse.Namespace(model=args.model, page_size=256, agents=[args.agents], prompt_tokens=24,
                                 new_tokens=args.new_tokens, tokens=args.tokens, recent_tokens=1024, plans=None,
                                 kv_dtype=args.kv_dtype, doc_kv="auto"))
    try:
        b.agents(args.agents, args.budget, args.peer, seed=1)  # warm
        ls = b.loop.stats
        s0, t0 = ls.steps, ls.step_s
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            r = b.agents(args.agents, args.budget, args.peer, seed=2)
        steps = ls.steps - s0
        gpu, count, host = defaultdict(float), defaultdict(int), defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                gpu[e.name] += e.device_time_total
                count[e.name] += 1
            elif e.name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaGraphLaunch",
                            "cudaEventSynchronize", "cudaMemsetAsync"):
                host[e.name] += 1
        busy = sum(gpu.values()) / 1e3 / steps
        print(f"{args.agents} agents, {args.budget} {args.peer}, {b.doc.num_tokens} tokens: {steps} steps, decode "
              f"{r['decode_tok_per_s']:.0f} tok/s; per step: loop {1e3 * (ls.step_s - t0) / steps:.2f} ms "
              f"(profiled), GPU busy {busy:.2f} ms, {sum(count.values()) / steps:.0f} kernels; host calls per step: "
              + ", ".join(f"{k} {v / steps:.1f}" for k, v in sorted(host.items())))
        for name, us in sorted(gpu.items(), key=lambda kv: -kv[1])[:30]:
            print(f"  {us / 1e3 / steps:7.3f} ms/step  {count[name] / steps:6.1f}/step  {name[:110]}")
    finally:
        b.loop.shutdown()


if __name__ == "__main__":
    main()
