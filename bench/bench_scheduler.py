"""Many agents at once on one replica: aggregate decode throughput and TTFT through the scheduler.

    python bench/bench_scheduler.py --model gemma3-270m-random --tokens 131072 --agents 1,4,16,64 \
        --budgets 0.05,0.12,dense [--new-tokens 64] [--hol] [--out FILE]

Random weights of the real architectures (bench/lib/models.py ``build_model``), one document
of random token ids prefilled once. For each budget and each agent count, that many agents start
together, each with its own question (random ids) and its own plan (sink, recent window and
random pages up to the budget; ``dense`` = every page, i.e. dense reuse batched the same way),
and generate ``--new-tokens`` greedy tokens through one :class:`Scheduler` (the engine's: decode
rows in batched CUDA-graph rows, prompts through QuerySlots graphs). Reported per case:
aggregate tok/s (all tokens / wall), decode tok/s (tokens after the first / decode span), TTFT
p50 and p99, rows per step, and the floor: per step the weights once plus each row's KV bytes
(pages read + sliding windows), at the copy bandwidth measured in the same run.

``--hol``: TTFT of a short question alone (p50 of 20) against short questions arriving every
50 ms while a ``--hol-tokens`` prompt is being prefilled through the same scheduler (p50, p99).

On CPU (no CUDA) it runs the same code in static mode, for a smoke test (tests/bench).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def _bandwidth(dev: torch.device) -> float:
    """Bytes/s of a device-to-device copy of 2 GiB (read + write counted)."""
    if dev.type != "cuda":
        return float("nan")
    a = torch.empty(1 << 30, dtype=torch.float16, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * a.numel() * a.element_size() * 10 / (time.perf_counter() - t0)


class Bench:
    def __init__(self, args):
        from agentctx.serving.batch_forward import run_rows
        from agentctx.serving.model_runner import ModelRunner
        from agentctx.serving.scheduler import Scheduler
        from bench.lib.models import build_model

        self.args = args
        self.dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.loaded, self.info = build_model(args.model, self.dev, seed=0)
        cuda = self.dev.type == "cuda"
        self.runner = ModelRunner(self.loaded, page_size=args.page_size,
                                  prefill_chunk_tokens=4096 if cuda else 4 * args.page_size,
                                  query_mode="graph" if cuda else "static")
        self.runner.batch_rows = max(args.agents)
        self.runner.batch_tail_tokens = args.prompt_tokens + args.new_tokens + 64
        self.vocab = self.loaded.model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        t0 = time.perf_counter()
        self.doc = self.runner.prefill(torch.randint(10, self.vocab, (args.tokens,), generator=g).tolist(),
                                       progress=False)
        self._sync()
        self.prefill_s = time.perf_counter() - t0
        from agentctx.serving.engine import _STEP_TOKENS  # the engine's prompt budgets for this device

        budget = _STEP_TOKENS["cuda" if cuda else "cpu"]
        self.sched = Scheduler(lambda rows: run_rows(self.runner, rows), max_rows=max(args.agents),
                               step_tokens=budget[0], step_tokens_decoding=budget[1], gather_s=0.002)
        self.bw = _bandwidth(self.dev)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.loaded.model.parameters())

    def _sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def plan(self, budget: str, rng: random.Random) -> tuple[int, ...] | None:
        n = self.doc.num_pages
        if budget == "dense":
            return None
        k = max(2, round(float(budget) * n))
        recent = max(1, self.args.recent_tokens // self.args.page_size)
        fixed = {0, *range(max(0, n - recent), n)}
        rest = [p for p in range(n) if p not in fixed]
        return tuple(sorted(fixed | set(rng.sample(rest, max(0, min(len(rest), k - len(fixed)))))))

    def row_bytes(self, pages) -> int:
        lay = self.runner.layout
        per_tok = lay.kv_bytes_per_token(self.runner.dtype)
        tokens = self.doc.num_tokens if pages is None else len(pages) * self.args.page_size
        window = len(lay.sliding_layers) * 2 * (lay.window or 0) * lay.num_kv_heads * lay.head_dim * \
            self.runner.dtype.itemsize
        return per_tok * tokens + window

    def agents(self, n: int, budget: str, seed: int) -> dict:
        from agentctx.serving.batch_forward import Row, release

        rng = random.Random(seed)
        plans = [self.plan(budget, rng) for _ in range(n)]
        prompts = [[rng.randrange(10, self.vocab) for _ in range(self.args.prompt_tokens)] for _ in range(n)]
        ttft, first_at, end_at = [0.0] * n, [0.0] * n, [0.0] * n
        start = threading.Barrier(n + 1)

        def agent(i):
            tail = self.runner.new_tail(self.doc)
            start.wait()
            t0 = time.perf_counter()
            try:
                with self.sched.open() as seq:
                    logits = seq.run(Row(self.doc, tail, prompts[i], plans[i]))
                    tok = int(logits.argmax())
                    first_at[i] = time.perf_counter()
                    ttft[i] = first_at[i] - t0
                    for _ in range(self.args.new_tokens - 1):
                        tok = int(seq.run(Row(self.doc, tail, [tok], plans[i])).argmax())
                    end_at[i] = time.perf_counter()
            finally:
                release(tail)

        s0 = (self.sched.stats.steps, self.sched.stats.rows)
        threads = [threading.Thread(target=agent, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        steps, rows = self.sched.stats.steps - s0[0], self.sched.stats.rows - s0[1]
        toks = n * self.args.new_tokens
        decode_span = max(end_at) - min(first_at)
        step_bytes = self.weight_bytes + sum(self.row_bytes(p) for p in plans)
        floor = n / (step_bytes / self.bw) if self.bw == self.bw else float("nan")
        decode = n * (self.args.new_tokens - 1) / decode_span
        return {"agents": n, "budget": budget, "pages_each": None if plans[0] is None else len(plans[0]),
                "wall_s": wall, "tok_per_s": toks / wall, "decode_tok_per_s": decode,
                "ttft_p50_ms": 1e3 * _pct(ttft, 50), "ttft_p99_ms": 1e3 * _pct(ttft, 99),
                "rows_per_step": rows / max(1, steps), "floor_tok_per_s": floor,
                "floor_frac": decode / floor if floor == floor else None}

    def head_of_line(self) -> dict:
        from agentctx.serving.batch_forward import Row

        rng = random.Random(7)
        plan = self.plan("0.12", rng)

        def short() -> float:
            tail = self.runner.new_tail(self.doc)
            q = [rng.randrange(10, self.vocab) for _ in range(self.args.prompt_tokens)]
            t0 = time.perf_counter()
            with self.sched.open() as seq:
                seq.run(Row(self.doc, tail, q, plan))
            return time.perf_counter() - t0

        for _ in range(3):
            short()
        idle = [short() for _ in range(20)]
        long_ids = [rng.randrange(10, self.vocab) for _ in range(self.args.hol_tokens)]
        busy: list[float] = []
        done = threading.Event()
        long_s = [0.0]

        def long_prompt():
            t0 = time.perf_counter()
            with self.sched.open() as seq:
                seq.run(Row(self.doc, self.runner.new_tail(self.doc), long_ids, plan))
            long_s[0] = time.perf_counter() - t0
            done.set()

        threading.Thread(target=long_prompt, daemon=True).start()
        time.sleep(0.01)
        while not done.is_set():
            busy.append(short())
            time.sleep(0.05)
        return {"hol_tokens": self.args.hol_tokens, "idle_p50_ms": 1e3 * statistics.median(idle),
                "busy_p50_ms": 1e3 * _pct(busy, 50), "busy_p99_ms": 1e3 * _pct(busy, 99), "busy_n": len(busy),
                "p99_over_idle_p50": _pct(busy, 99) / statistics.median(idle), "long_prompt_s": long_s[0]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma3-270m-random")
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--agents", default="1,4,16,64")
    ap.add_argument("--budgets", default="0.05,0.12,dense")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=24)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--recent-tokens", type=int, default=1024)
    ap.add_argument("--hol", action="store_true")
    ap.add_argument("--hol-tokens", type=int, default=32768)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.agents = [int(x) for x in args.agents.split(",")]
    b = Bench(args)
    dev = torch.cuda.get_device_name() if b.dev.type == "cuda" else platform.processor() or "cpu"
    print(f"{args.model} ({b.info['weights']}, {b.runner.dtype}) on {dev}, {b.doc.num_tokens}-token document "
          f"({b.doc.num_pages} pages, prefill {b.prefill_s:.1f} s), copy bandwidth {b.bw / 1e12:.2f} TB/s, "
          f"query mode {b.runner.query_mode}", flush=True)
    results = []
    for budget in args.budgets.split(","):
        for n in args.agents:
            b.agents(n, budget, seed=1000 + n)  # warm: captures this bucket's graphs
            r = b.agents(n, budget, seed=n)
            results.append(r)
            print(f"  {budget:>6} {n:3d} agents: {r['tok_per_s']:9.0f} tok/s (decode {r['decode_tok_per_s']:9.0f}, "
                  f"floor {r['floor_tok_per_s']:9.0f}), TTFT p50 {r['ttft_p50_ms']:7.1f} ms p99 "
                  f"{r['ttft_p99_ms']:7.1f} ms, {r['rows_per_step']:.1f} rows/step", flush=True)
    for n in args.agents:
        by = {r["budget"]: r for r in results if r["agents"] == n}
        if "dense" in by:
            print(f"  {n:3d} agents, decode tok/s vs dense: " + ", ".join(
                f"{k} {v['decode_tok_per_s'] / by['dense']['decode_tok_per_s']:.2f}x" for k, v in by.items()
                if k != "dense"))
    out = {"model": args.model, "device": dev, "tokens": b.doc.num_tokens, "bandwidth_Bps": b.bw,
           "weights_bytes": b.weight_bytes, "results": results}
    if args.hol:
        out["head_of_line"] = h = b.head_of_line()
        print(f"  head-of-line: short question TTFT idle p50 {h['idle_p50_ms']:.1f} ms; during a "
              f"{h['hol_tokens']}-token prompt p50 {h['busy_p50_ms']:.1f} ms p99 {h['busy_p99_ms']:.1f} ms "
              f"({h['p99_over_idle_p50']:.2f}x idle p50, n={h['busy_n']})")
    b.sched.shutdown()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
