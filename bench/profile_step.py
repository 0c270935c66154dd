"""Where one decode forward's time goes (the ~29 ms per-forward overhead of BENCHMARKS.md §4).

    python bench/profile_step.py                       # CUDA: Gemma-3-270M random weights, 32K KV
    python bench/profile_step.py --tokens 2048         # CPU smoke run

Prefills random token ids once, then profiles N single-token extends over 12% of
the pages with torch.profiler; prints wall ms per forward, kernel launches per
forward, GPU busy time per forward, and the ops with the most host time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m-random")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--fraction", type=float, default=0.12)
    args = ap.parse_args()

    from bench.bench_session import build_model
    from serving.model_runner import ModelRunner

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaded, info = build_model(args.model, dev, seed=0)
    runner = ModelRunner(loaded, page_size=256, prefill_chunk_tokens=4096 if dev.type == "cuda" else 1024)
    g = torch.Generator().manual_seed(0)
    vocab = loaded.model.config.vocab_size
    ids = torch.randint(10, vocab, (args.tokens,), generator=g).tolist()
    doc = runner.prefill(ids, progress=False)
    n_sel = max(2, round(args.fraction * doc.num_pages))
    pages = sorted(set([0, doc.num_pages - 1] + torch.randperm(doc.num_pages, generator=g)[:n_sel].tolist()))
    tail = runner.new_tail(doc)
    runner.extend(doc, tail, ids[:24], pages)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        for _ in range(3):
            runner.extend(doc, tail, [ids[5]], pages)
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            runner.extend(doc, tail, [ids[7]], pages)
        sync()
        wall = (time.perf_counter() - t0) / args.steps
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(args.steps):
                runner.extend(doc, tail, [ids[9]], pages)
            sync()
    ev = prof.key_averages()
    launches = sum(e.count for e in ev if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    gpu_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in ev) / args.steps
    print(f"# {args.model} ({info.get('weights')}), {dev}, {doc.num_tokens} KV tokens, {len(pages)} pages "
          f"({100 * len(pages) / doc.num_pages:.0f}%)")
    print(f"wall per forward: {1e3 * wall:.2f} ms; kernel launches per forward: {launches / args.steps:.0f}; "
          f"GPU busy per forward: {gpu_us / 1e3:.2f} ms")
    print(ev.table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
