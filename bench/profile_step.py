"""Where one decode forward's time goes, eager vs static slots vs CUDA-graph replay.

    python bench/profile_step.py                       # CUDA: Gemma-3-270M random weights, 32K KV
    python bench/profile_step.py --tokens 2048         # CPU smoke run (eager vs static)

Prefills random token ids once, then times N single-token extends over 12% of the
pages in each query mode, side by side in one process (serving.static_query), and
profiles the eager forward with torch.profiler: kernel launches per forward, GPU
busy time per forward, and the ops with the most host time.
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
    ap.add_argument("--prompt", type=int, default=24, help="prompt tokens before the timed decode steps")
    ap.add_argument("--sort", default="self_cpu_time_total", help="profiler table order (e.g. self_cuda_time_total)")
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

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    modes = ["eager", "static"] + (["graph"] if dev.type == "cuda" else [])
    wall: dict[str, tuple[float, float]] = {}
    first: dict[str, list[int]] = {}
    with torch.inference_mode():
        for mode in modes:
            runner.query_mode = mode
            for rep in range(2):  # the first round compiles / captures
                tail = runner.new_tail(doc)
                sync()
                t0 = time.perf_counter()
                logits = runner.extend(doc, tail, ids[: args.prompt], pages)
                nxt = int(logits.argmax())
                t1 = time.perf_counter()
                toks = [nxt]
                for _ in range(args.steps):
                    nxt = int(runner.extend(doc, tail, [nxt], pages).argmax())
                    toks.append(nxt)
                sync()
                t2 = time.perf_counter()
            wall[mode] = (t1 - t0, (t2 - t1) / args.steps)
            if mode == "graph":
                for w, qs in doc.query_slots.items():
                    print(f"slots width {w}: graphs for buckets {sorted(qs.graphs)}; failed captures {qs.failed}")
                    if 1 in qs.graphs:
                        sync()
                        r0 = time.perf_counter()
                        for _ in range(20):
                            qs.graphs[1][0].replay()
                        sync()
                        print(f"bare replay of the 1-token graph: {(time.perf_counter() - r0) / 20 * 1e3:.2f} ms")
            first[mode] = toks
        runner.query_mode = "eager"
        tail = runner.new_tail(doc)
        runner.extend(doc, tail, ids[: args.prompt], pages)
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
          f"({100 * len(pages) / doc.num_pages:.0f}%), prompt {args.prompt} tokens")
    base_p, base_d = wall["eager"]
    for mode in modes:
        p, d = wall[mode]
        same = "same tokens as eager" if first[mode] == first["eager"] else f"DIFFERENT tokens: {first[mode]}"
        print(f"{mode:>6}: prompt forward {1e3 * p:7.2f} ms ({base_p / p:5.1f}x eager), decode forward "
              f"{1e3 * d:7.2f} ms ({base_d / d:5.1f}x eager); {same}")
    print(f"eager: kernel launches per forward: {launches / args.steps:.0f}; GPU busy per forward: {gpu_us / 1e3:.2f} ms")
    print(ev.table(sort_by=args.sort, row_limit=22, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
