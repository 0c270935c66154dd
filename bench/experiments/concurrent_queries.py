"""Many short planned queries at once on one in-process engine (CPU, real Gemma 3 270M): the engine's
share of the HTTP bench's tail latency (bench/bench_http.py, BENCHMARKS §6), without Serve or HTTP.

    python bench/experiments/concurrent_queries.py [--clients 32] [--rounds 2] [--decode-batch 16]

The bundled sample contract prefilled once; each query a short question (the HTTP bench's), greedy,
8 new tokens, over its own plan (the sink page, the last page and 3 random pages: ~12% of the 22).
First one query at a time (the p50 of 8), then ``--clients`` threads started together, each sending
``--per-client`` queries one after another, ``--rounds`` times: requests/s, wall time, p50 / p99
latency, p99 over the lone p50, steps and step time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_http import MAX_NEW, QUESTIONS, pct  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode-batch", type=int, default=16)
    ap.add_argument("--per-client", type=int, default=1,
                    help="queries each client sends one after another (the HTTP bench sends 3)")
    args = ap.parse_args()
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.types import GenerateRequest

    eng = LocalEngine(None, decode_batch=args.decode_batch)
    doc = eng.tokenize_document((REPO / "agentctx" / "samples" / "sample_contract.txt").read_text())
    eng.prefill("bench", doc, progress=False)
    n_pages = -(-len(doc.token_ids) // eng.page_size)
    rnd = random.Random(0)
    plans = [tuple(sorted({0, n_pages - 1, *rnd.sample(range(1, n_pages - 1), 3)})) for _ in range(args.clients)]

    def query(i: int) -> float:
        req = GenerateRequest("bench", f"\n\nQuestion: {QUESTIONS[i % len(QUESTIONS)]}\nAnswer:", plans[i], MAX_NEW,
                              0.0, ("\n\n", "\nQuestion:"))
        t0 = time.perf_counter()
        eng.generate(req)
        return time.perf_counter() - t0

    for i in range(3):  # warm-up
        query(i)
    alone = statistics.median(query(i) for i in range(8))
    print(f"{eng.runner.dtype}, decode rows {args.decode_batch}: one query alone p50 {alone:.3f} s")
    for r in range(args.rounds):
        lat: list[float] = []

        def run(i: int) -> None:
            for _ in range(args.per_client):
                lat.append(query(i))

        steps0, step_s0 = eng.loop.stats.steps, eng.loop.stats.step_s
        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        steps = eng.loop.stats.steps - steps0
        print(f"round {r + 1}: {args.clients} clients x {args.per_client}: {len(lat) / wall:.2f} req/s, "
              f"wall {wall:.2f} s, p50 {pct(lat, 0.5):.2f} s, p99 "
              f"{pct(lat, 0.99):.2f} s = {pct(lat, 0.99) / alone:.1f}x alone; {steps} steps, "
              f"{1e3 * (eng.loop.stats.step_s - step_s0) / max(steps, 1):.0f} ms a step", flush=True)
    eng.loop.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
