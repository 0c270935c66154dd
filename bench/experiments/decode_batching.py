"""Concurrent generations over one context: decode steps batched vs one generation at a time,
side by side in one process on the same loaded model (real Gemma 3 270M, CPU by default).

    python bench/experiments/decode_batching.py [--tokens 4096] [--agents 4] [--new-tokens 32] [--budget 0.12]

Each agent asks its own question over its own ~budget share of the pages, greedy, no stop.
"alone" is decode_batch=1 (before: a generation holds the forward lock from prompt to last
token); "batched" lets concurrent generations share steps (serving/engine/loop.py; before it
serving/scheduler.py, and before that serving/decode_batcher.py).
Both run twice, interleaved; the second round is reported. Checks the tokens are identical.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

QUESTIONS = ("Who must give notice of termination?", "What is the liability cap?",
             "Which law governs this agreement?", "When are invoices due?", "What happens on a change of control?",
             "Who owns the intellectual property?", "How long does confidentiality last?", "Can either party assign?")


def run_round(engine, reqs) -> dict:
    results = [None] * len(reqs)

    def one(i):
        results[i] = engine.generate(reqs[i])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(len(r.token_ids) for r in results)
    return {"wall_s": wall, "tokens": tokens, "tok_per_s": tokens / wall,
            "mean_ttft_s": sum(r.ttft_s for r in results) / len(results),
            "max_ttft_s": max(r.ttft_s for r in results),
            "token_ids": [r.token_ids for r in results]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="local checkpoint dir; default: embedded Gemma 3 270M")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--budget", type=float, default=0.12, help="share of pages each agent attends")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.types import GenerateRequest
    from tests.fixtures.contracts import generate_contract

    loaded = load_model(args.model)
    engines = {"alone": LocalEngine(loaded, decode_batch=1),
               "batched": LocalEngine(loaded, decode_batch=max(2, args.agents))}
    text = generate_contract(args.tokens, seed=0).text
    doc = engines["alone"].tokenize_document(text)
    for e in engines.values():
        e.prefill("doc", doc, progress=False)
    n_pages = -(-len(doc.token_ids) // engines["alone"].page_size)
    rng = random.Random(0)
    k = max(1, round(args.budget * n_pages))
    reqs = [GenerateRequest("doc", f"Question: {QUESTIONS[i % len(QUESTIONS)]}\nAnswer:",
                            pages=tuple(sorted(rng.sample(range(n_pages), k))), max_new_tokens=args.new_tokens,
                            stop=()) for i in range(args.agents)]
    rounds = {}
    for _ in range(2):
        for name, e in engines.items():
            rounds[name] = run_round(e, reqs)
    alone, batched = rounds["alone"], rounds["batched"]
    same = alone["token_ids"] == batched["token_ids"]
    stats = engines["batched"].describe()["decode_batching"]
    print(f"{loaded.model_id} on {engines['alone'].runner.device}, {len(doc.token_ids)}-token document, "
          f"{args.agents} agents x {args.new_tokens} tokens, {k}/{n_pages} pages each ({platform.node()}):")
    for name, r in rounds.items():
        print(f"  {name:>8}: wall {r['wall_s']:6.2f} s  {r['tok_per_s']:6.2f} tok/s  "
              f"TTFT mean {r['mean_ttft_s'] * 1e3:7.0f} ms  max {r['max_ttft_s'] * 1e3:7.0f} ms")
    print(f"  batched / alone: throughput {batched['tok_per_s'] / alone['tok_per_s']:.2f}x, "
          f"mean TTFT {alone['mean_ttft_s'] / batched['mean_ttft_s']:.2f}x lower; tokens identical: {same}; "
          f"rows per forward: mean {stats['steps'] / max(1, stats['forwards']):.2f}, largest {stats['largest']}")
    if args.out:
        out = {"model": loaded.model_id, "device": str(engines["alone"].runner.device), "tokens": len(doc.token_ids),
               "agents": args.agents, "new_tokens": args.new_tokens, "pages_each": k, "pages": n_pages,
               "tokens_identical": same, "batching": stats,
               **{n: {key: v for key, v in r.items() if key != "token_ids"} for n, r in rounds.items()}}
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
