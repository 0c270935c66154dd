"""Where one decode forward's time goes, eager vs static slots vs CUDA-graph replay.

    python bench/experiments/profile_step.py                       # CUDA: Gemma-3-270M random weights, 32K KV
    python bench/experiments/profile_step.py --tokens 2048         # CPU smoke run (eager vs static)

Prefills random token ids once, then times N single-token extends over 12% of the
pages in each query mode, side by side in one process (serving.runner.static_query), on
CUDA also with fused RMSNorm kernels (serving.fusions.norms, "+fn"), and profiles
the eager forward with torch.profiler: kernel launches per forward, GPU busy time
per forward, and the ops with the most host time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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

    from agentctx.kernels import tail_merge, tail_tiles
    from agentctx.serving.runner.model_runner import ModelRunner
    from bench.lib.models import build_model

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

    # (label, query mode, fused norms, tail impl, window impl, window splits, fused RoPE,
    # merged projections). "+p" = q/k/v and gate/up as one product each (serving.fusions.proj).
    # "+tk" = the slot-buffer kernels of kernels/tail_merge.py (global layers: the query's own
    # tokens merged with the pages; sliding layers: the window band), "+fn" = fused RMSNorm,
    # "+r" = fused RoPE (serving.fusions.rope); all CUDA only (Triton). "-w" = the sliding
    # layers' window band on the torch path (SDPA with a band mask) while the global layers keep
    # the tail kernel: what the window kernel alone buys. "-s" = the window kernel unsplit (one
    # program per KV head and row tile streams the whole band): what split-K buys.
    variants = [("eager", "eager", False, "torch", "torch", None, False, False),
                ("static", "static", False, "torch", "torch", None, False, False)]
    if dev.type == "cuda":
        variants += [("graph", "graph", False, "torch", "torch", None, False, False),
                     ("graph+tk", "graph", False, "auto", "auto", None, False, False)]
        if runner.norms is not None and runner.norms.fused:
            variants += [("eager+fn", "eager", True, "torch", "torch", None, False, False),
                         ("graph+tk+fn-w", "graph", True, "auto", "torch", None, False, False),
                         ("graph+tk+fn-s", "graph", True, "auto", "auto", 1, False, False),
                         ("graph+tk+fn", "graph", True, "auto", "auto", None, False, False)]
            if getattr(runner, "rope", None) is not None and runner.rope.fused:
                variants += [("graph+tk+fn+r", "graph", True, "auto", "auto", None, True, False)]
                if getattr(runner, "proj", None) is not None and runner.proj.fused:
                    variants += [("graph+tk+fn+r+p", "graph", True, "auto", "auto", None, True, True)]
    has_fused = runner.fused_norms
    wall: dict[str, tuple[float, float]] = {}
    first: dict[str, list[int]] = {}
    first_logits: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        replays = {}
        for label, mode, fused, tail_impl, window_impl, splits, rope, proj in variants:
            runner.query_mode, runner.fused_norms, runner.tail_impl = mode, fused, tail_impl
            runner.window_impl = window_impl
            tail_tiles.WINDOW_SPLITS = splits
            if hasattr(runner, "fused_rope"):
                runner.fused_rope = rope
            if hasattr(runner, "fused_proj"):
                runner.fused_proj = proj
            doc.query_slots.clear()  # captured graphs keep the kernels they were captured with
            for _rep in range(2):  # the first round compiles / captures
                tail = runner.new_tail(doc)
                sync()
                t0 = time.perf_counter()
                logits = runner.extend(doc, tail, ids[: args.prompt], pages)
                first_logits[label] = logits.float().clone()
                nxt = int(logits.argmax())
                t1 = time.perf_counter()
                toks = [nxt]
                for _ in range(args.steps):
                    nxt = int(runner.extend(doc, tail, [nxt], pages).argmax())
                    toks.append(nxt)
                sync()
                t2 = time.perf_counter()
            wall[label] = (t1 - t0, (t2 - t1) / args.steps)
            if mode == "graph":
                for w, qs in doc.query_slots.items():
                    print(f"{label}: slots width {w}: graphs for buckets {sorted(qs.graphs)}; failed {qs.failed}")
                    if 1 in qs.graphs:
                        # Keep the slot set alive too: its graphs read its input and tail buffers.
                        replays[label] = (qs.graphs[1][0], qs)
                        sync()
                        r0 = time.perf_counter()
                        for _ in range(20):
                            qs.graphs[1][0].replay()
                        sync()
                        print(f"{label}: bare replay of the 1-token graph: "
                              f"{(time.perf_counter() - r0) / 20 * 1e3:.2f} ms")
            first[label] = toks
        # The 1-token graphs again, interleaved round by round, so clock drift hits all alike.
        rounds: dict[str, list[float]] = {k: [] for k in replays}
        for _ in range(7):
            for label, (graph, _) in replays.items():
                sync()
                r0 = time.perf_counter()
                for _ in range(20):
                    graph.replay()
                sync()
                rounds[label].append((time.perf_counter() - r0) / 20 * 1e3)
        # Profile the static forward (what a graph replays), without and with both fusions.
        runner.query_mode = "static"
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        profiles = {}
        tail_tiles.WINDOW_SPLITS = None
        for fused in ([False, True] if has_fused else [False]):
            runner.fused_norms = fused
            if hasattr(runner, "fused_rope"):
                runner.fused_rope = fused and getattr(runner, "rope", None) is not None and bool(runner.rope.fused)
            if hasattr(runner, "fused_proj"):
                runner.fused_proj = fused and getattr(runner, "proj", None) is not None and bool(runner.proj.fused)
            runner.tail_impl = runner.window_impl = "auto" if fused else "torch"
            doc.query_slots.clear()
            tail = runner.new_tail(doc)
            runner.extend(doc, tail, ids[: args.prompt], pages)
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(args.steps):
                    runner.extend(doc, tail, [ids[9]], pages)
                sync()
            profiles[fused] = prof.key_averages()
    print(f"# {args.model} ({info.get('weights')}), {dev}, {doc.num_tokens} KV tokens, {len(pages)} pages "
          f"({100 * len(pages) / doc.num_pages:.0f}%), prompt {args.prompt} tokens; fn = fused RMSNorm")
    base_p, base_d = wall["eager"]
    ref = first_logits["eager"]
    for label, *_ in variants:
        p, d = wall[label]
        rel = ((first_logits[label] - ref).norm() / ref.norm()).item()
        same = "same tokens as eager" if first[label] == first["eager"] else f"different tokens: {first[label]}"
        print(f"{label:>13}: prompt forward {1e3 * p:7.2f} ms ({base_p / p:5.1f}x eager), decode forward "
              f"{1e3 * d:7.2f} ms ({base_d / d:5.1f}x eager); first logits rel diff {rel:.1e}; {same}")
    if rounds:
        base = sorted(rounds["graph"])[3]
        print("1-token graph replay, median of 7 interleaved rounds: " + "; ".join(
            f"{k} {sorted(v)[3]:.2f} ms ({base / sorted(v)[3]:.2f}x graph)" for k, v in rounds.items()))
    for fused, ev in profiles.items():
        launches = sum(e.count for e in ev if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                        "cuLaunchKernelEx"))
        gpu_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in ev) / args.steps
        print(f"static{'+all fusions' if fused else ''}: kernel launches per forward: {launches / args.steps:.0f}; "
              f"GPU busy per forward: {gpu_us / 1e3:.2f} ms")
    print(f"slot kernels' first-call checks (True = kernel in use): {tail_merge._checked}")
    print(profiles[has_fused].table(sort_by=args.sort, row_limit=22, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
