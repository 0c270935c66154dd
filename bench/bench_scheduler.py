"""Many agents at once on one replica: decode throughput, TTFT and host syncs through the engine loop.

    python bench/bench_scheduler.py --model gemma3-270m-random --tokens 1048576 --agents 1,4,16 \
        --budgets 0.12,dense --peers union,rows [--plans FILE] [--new-tokens 64] [--hol] [--out FILE]
        [--kv-dtype bf16|fp8_e4m3|int8] [--doc-kv auto|prefill|random]

Random weights of the real architectures (bench/lib/models.py ``build_model``), one document of
random token ids prefilled once. ``--kv-dtype`` fp8_e4m3 / int8 holds its pages quantised on the
device (serving/runner/quant_kv.py), read so by the decode kernels; bf16 is the compute dtype's
pages (float32 on CPU). ``--doc-kv random`` draws the document's KV at random instead of
prefilling it (bench/lib/random_doc.py: quantised chunk by chunk, so a 1M-token Llama-3-8B
context never exists in bf16 on the device); ``auto``: random for quantised pages, else prefill.
For each budget, peer and agent count, that many agents start together through one
:class:`EngineLoop` (serving/engine/loop.py), each with its own question (random ids) and plan
(sink, recent window and random pages up to the budget; ``dense`` = every page), and generate
``--new-tokens`` greedy tokens. Peers, each measured in the same run:

* ``union``: the engine's default: the decode rows of a document attend the union of their
  plans, each page read once per step (kernels/union_attend.py). With ``dense`` plans this is
  the **dense-cascade** peer (every page read once for all rows).
* ``rows``: each row reads its own pages through its own block table (the engine before the
  union kernel; with ``dense`` plans, **dense reuse batched row by row**).

Reported per case: decode tok/s (tokens after the first / decode span), aggregate tok/s, TTFT
p50/p99, rows per step, host syncs per decode step (every synchronising CUDA call, counted by
torch's sync debug mode), the union's share of the document, and the floor: per step the weights
once plus the KV bytes the peer must read (union: each union page once; rows: each row's pages),
plus the sliding windows, at the copy bandwidth measured in the same run.

``--plans FILE``: JSON ``{"pages": N, "plans": [[page, ...], ...]}``, real plans (e.g. the
review's own, bench/experiments/review_plans.py) scaled onto this document's pages, instead of
random ones; their overlap is what union attention saves.

``--hol``: TTFT of a short question alone (p50 of 20) against short questions arriving every
50 ms while a ``--hol-tokens`` prompt is prefilled through the same loop (p50, p99).

On CPU (no CUDA) it runs the same code in static mode, for a smoke test (tests/bench).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import warnings
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


class SyncCounter:
    """Synchronising CUDA calls made while active (torch's sync debug mode, one warning each)."""

    def __init__(self, on: bool):
        self.on, self.count = on, 0

    def __enter__(self):
        if self.on:
            self._w = warnings.catch_warnings(record=True)
            self._log = self._w.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        if self.on:
            torch.cuda.set_sync_debug_mode("default")
            self.count = sum(1 for w in self._log if "synchroniz" in str(w.message))
            self._w.__exit__(*exc)


class Bench:
    def __init__(self, args):
        from agentctx.serving.engine.local import STEP_TOKENS
        from agentctx.serving.engine.loop import GRAPH_DECODE_STEPS, EngineLoop
        from agentctx.serving.engine.scheduler import Scheduler
        from agentctx.serving.runner.batch_forward import run_greedy_steps, run_step
        from agentctx.serving.runner.model_runner import ModelRunner
        from bench.lib.models import build_model

        self.args = args
        self.dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.loaded, self.info = build_model(args.model, self.dev, seed=0)
        cuda = self.dev.type == "cuda"
        self.runner = ModelRunner(self.loaded, page_size=args.page_size,
                                  prefill_chunk_tokens=4096 if cuda else 4 * args.page_size,
                                  query_mode="graph" if cuda else "static",
                                  kv_dtype="auto" if args.kv_dtype == "bf16" else args.kv_dtype)
        self.runner.batch_rows = max(args.agents)
        self.runner.batch_tail_tokens = args.prompt_tokens + args.new_tokens + 64
        self.vocab = self.loaded.model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        t0 = time.perf_counter()
        self.random_kv = args.doc_kv == "random" or (args.doc_kv == "auto" and args.kv_dtype != "bf16")
        if self.random_kv:
            from bench.lib.random_doc import random_doc

            self.doc = random_doc(self.runner, args.tokens, seed=0)
        else:
            self.doc = self.runner.prefill(torch.randint(10, self.vocab, (args.tokens,), generator=g).tolist(),
                                           progress=False)
        self._sync()
        self.prefill_s = time.perf_counter() - t0
        d = self.doc
        # Bytes of one page of every global layer as held (values, plus scales when quantised).
        self.page_bytes = sum(t.numel() * t.element_size() for t in (*d.k_pages.values(), *d.v_pages.values(),
                                                                       *d.k_scales.values(), *d.v_scales.values())
                              ) / max(1, d.num_pages)
        budget = STEP_TOKENS["cuda" if cuda else "cpu"]
        # Greedy decode windows as the serving engine runs them (serving/engine/local.py), unless set.
        steps = getattr(args, "decode_steps", None)
        self.decode_steps = steps or (GRAPH_DECODE_STEPS if self.runner.query_mode == "graph" else 1)
        self.loop = EngineLoop(lambda rows: run_step(self.runner, rows),
                               Scheduler(max_rows=max(args.agents), step_tokens=budget[0],
                                         step_tokens_decoding=budget[1]), device=self.dev,
                               run_greedy=lambda rows, k: run_greedy_steps(self.runner, rows, k),
                               decode_steps=self.decode_steps)
        self.bw = _bandwidth(self.dev)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.loaded.model.parameters())
        self.real_plans = None
        if args.plans:
            spec = json.loads(Path(args.plans).read_text())
            scale = self.doc.num_pages / spec["pages"]
            self.real_plans = [tuple(sorted({min(self.doc.num_pages - 1, int(p * scale)) for p in plan}))
                               for plan in spec["plans"]]

    def _sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def plan(self, budget: str, rng: random.Random, i: int) -> tuple[int, ...] | None:
        n = self.doc.num_pages
        if budget == "dense":
            return None
        if budget == "real":
            return self.real_plans[i % len(self.real_plans)]
        k = max(2, round(float(budget) * n))
        recent = max(1, self.args.recent_tokens // self.args.page_size)
        fixed = {0, *range(max(0, n - recent), n)}
        rest = [p for p in range(n) if p not in fixed]
        return tuple(sorted(fixed | set(rng.sample(rest, max(0, min(len(rest), k - len(fixed)))))))

    def kv_bytes(self, pages: int) -> float:
        return self.page_bytes * pages

    def window_bytes(self) -> int:
        lay = self.runner.layout
        return len(lay.sliding_layers) * 2 * (lay.window or 0) * lay.num_kv_heads * lay.head_dim * \
            self.runner.dtype.itemsize

    def agents(self, n: int, budget: str, peer: str, seed: int) -> dict:
        from agentctx.serving.engine.request import Request

        self.runner.union_attention = peer == "union"
        rng = random.Random(seed)
        plans = [self.plan(budget, rng, i) for i in range(n)]
        prompts = [[rng.randrange(10, self.vocab) for _ in range(self.args.prompt_tokens)] for _ in range(n)]
        st, ls = self.loop.scheduler.stats, self.loop.stats
        s0 = (st.steps, st.rows, ls.host_syncs, ls.steps)
        cuda = self.dev.type == "cuda"
        with SyncCounter(cuda) as syncs:
            t0 = time.perf_counter()
            reqs = [self.loop.submit(Request(self.doc, self.runner.new_tail(self.doc), prompts[i], plans[i],
                                             max_new_tokens=self.args.new_tokens, ignore_eos=True))
                    for i in range(n)]
            first_at, end_at = [0.0] * n, [0.0] * n
            for i, r in enumerate(reqs):
                for ev in r.stream:
                    if ev.error is not None:
                        raise ev.error
                end_at[i] = time.perf_counter()
                first_at[i] = r.first_token_at
            wall = time.perf_counter() - t0
        steps, rows = st.steps - s0[0], st.rows - s0[1]
        forwards = ls.steps - s0[3]  # a greedy decode window is decode_steps forwards of one schedule
        ttft = [f - t0 for f in first_at]
        toks = n * self.args.new_tokens
        decode_span = max(end_at) - min(first_at)
        decode = n * (self.args.new_tokens - 1) / decode_span
        every = set(range(self.doc.num_pages))
        union = set().union(*(every if p is None else set(p) for p in plans))
        read_pages = len(union) if peer == "union" else sum(len(every if p is None else p) for p in plans)
        step_bytes = self.weight_bytes + self.kv_bytes(read_pages) + n * self.window_bytes()
        floor = n / (step_bytes / self.bw) if self.bw == self.bw else float("nan")
        return {"agents": n, "budget": budget, "peer": peer,
                "pages_each": None if plans[0] is None else round(statistics.mean(len(p) for p in plans), 1),
                "union_share": len(union) / self.doc.num_pages, "wall_s": wall, "tok_per_s": toks / wall,
                "decode_tok_per_s": decode, "ttft_p50_ms": 1e3 * _pct(ttft, 50), "ttft_p99_ms": 1e3 * _pct(ttft, 99),
                "rows_per_step": rows / max(1, steps), "steps": steps,
                "forwards": forwards, "decode_steps": self.decode_steps,
                "host_syncs_per_step": syncs.count / max(1, forwards) if cuda else None,
                "loop_syncs_per_step": (ls.host_syncs - s0[2]) / max(1, forwards),
                "floor_tok_per_s": floor, "floor_frac": decode / floor if floor == floor else None}

    def head_of_line(self) -> dict:
        from agentctx.serving.engine.request import Request

        self.runner.union_attention = True
        rng = random.Random(7)
        plan = self.plan("0.12", rng, 0)

        def short() -> float:
            q = [rng.randrange(10, self.vocab) for _ in range(self.args.prompt_tokens)]
            t0 = time.perf_counter()
            r = self.loop.submit(Request(self.doc, self.runner.new_tail(self.doc), q, plan, max_new_tokens=1,
                                         ignore_eos=True))
            list(r.stream)
            return r.first_token_at - t0

        long_ids = [rng.randrange(10, self.vocab) for _ in range(self.args.hol_tokens)]
        # Warm: a long prompt alone first, so Triton's first compiles of the long-prompt path's
        # kernels and its graph captures (each once per process and shape) stay out of the figures.
        warm = self.loop.submit(Request(self.doc, self.runner.new_tail(self.doc), long_ids, plan, max_new_tokens=1,
                                        ignore_eos=True))
        list(warm.stream)
        for _ in range(3):
            short()
        idle = [short() for _ in range(20)]
        busy: list[float] = []
        stamps: list[float] = []  # when each step while the long prompt runs began
        self.loop.on_step = lambda plan: stamps.append(time.perf_counter())
        t0 = time.perf_counter()
        long_req = self.loop.submit(Request(self.doc, self.runner.new_tail(self.doc), long_ids, plan,
                                            max_new_tokens=1, ignore_eos=True))
        time.sleep(0.01)
        while not long_req.finished:
            busy.append(short())
            time.sleep(0.05)
        list(long_req.stream)
        long_s = time.perf_counter() - t0
        self.loop.on_step = None
        if long_req.error is not None:
            raise long_req.error
        gaps = [b - a for a, b in zip(stamps, stamps[1:])] or [0.0]
        return {"hol_tokens": self.args.hol_tokens, "steps": len(stamps), "step_p50_ms": 1e3 * statistics.median(gaps),
                "step_max_ms": 1e3 * max(gaps), "idle_p50_ms": 1e3 * statistics.median(idle),
                "busy_p50_ms": 1e3 * _pct(busy, 50), "busy_p99_ms": 1e3 * _pct(busy, 99), "busy_n": len(busy),
                "p99_over_idle_p50": _pct(busy, 99) / statistics.median(idle), "long_prompt_s": long_s}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma3-270m-random")
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--agents", default="1,4,16,64")
    ap.add_argument("--budgets", default="0.12,dense", help="fractions, 'dense', 'real' (with --plans)")
    ap.add_argument("--peers", default="union,rows")
    ap.add_argument("--plans", default=None)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=24)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--recent-tokens", type=int, default=1024)
    ap.add_argument("--hol", action="store_true")
    ap.add_argument("--hol-tokens", type=int, default=32768)
    ap.add_argument("--kv-dtype", default="bf16", choices=("bf16", "fp8_e4m3", "int8"),
                    help="device pages: the compute dtype's (bf16 on GPU) or quantised")
    ap.add_argument("--doc-kv", default="auto", choices=("auto", "prefill", "random"),
                    help="the document's KV: prefilled, or drawn at random (auto: random when quantised)")
    ap.add_argument("--decode-steps", type=int, default=None,
                    help="greedy decode window: forwards per host sync (default: the engine's, 4 on CUDA graphs)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.agents = [int(x) for x in args.agents.split(",")]
    b = Bench(args)
    dev = torch.cuda.get_device_name() if b.dev.type == "cuda" else platform.processor() or "cpu"
    made = "random KV" if b.random_kv else "prefill"
    print(f"{args.model} ({b.info['weights']}, {b.runner.dtype}) on {dev}, {b.doc.num_tokens}-token document "
          f"({b.doc.num_pages} pages, {b.doc.kv_dtype} pages, {b.doc.kv_bytes() / 2**30:.2f} GiB, {made} "
          f"{b.prefill_s:.1f} s), copy bandwidth {b.bw / 1e12:.2f} TB/s, query mode {b.runner.query_mode}, "
          f"greedy decode window {b.decode_steps}", flush=True)
    results = []
    try:
        for budget in args.budgets.split(","):
            for peer in args.peers.split(","):
                for n in args.agents:
                    b.agents(n, budget, peer, seed=1000 + n)  # warm: captures this bucket's graphs
                    r = b.agents(n, budget, peer, seed=n)
                    results.append(r)
                    syncs = r["host_syncs_per_step"]
                    print(f"  {budget:>6} {peer:>5} {n:3d} agents: decode {r['decode_tok_per_s']:9.0f} tok/s "
                          f"(floor {r['floor_tok_per_s']:9.0f}, union {r['union_share']:.0%}), TTFT p50 "
                          f"{r['ttft_p50_ms']:7.1f} ms p99 {r['ttft_p99_ms']:7.1f} ms, {r['rows_per_step']:.1f} "
                          f"rows/step, host syncs/step {'-' if syncs is None else f'{syncs:.2f}'}", flush=True)
        by = {(r["budget"], r["peer"], r["agents"]): r["decode_tok_per_s"] for r in results}
        for n in args.agents:
            for budget in args.budgets.split(","):
                if budget == "dense":
                    continue
                sel = by.get((budget, "union", n))
                cascade, rows = by.get(("dense", "union", n)), by.get(("dense", "rows", n))
                parts = []
                if sel and cascade:
                    parts.append(f"{sel / cascade:.2f}x dense-cascade")
                if sel and rows:
                    parts.append(f"{sel / rows:.2f}x dense row by row")
                if parts:
                    print(f"  {n:3d} agents, {budget} union: " + ", ".join(parts))
        out = {"model": args.model, "device": dev, "tokens": b.doc.num_tokens, "bandwidth_Bps": b.bw,
               "kv_dtype": args.kv_dtype, "doc_kv": "random" if b.random_kv else "prefill",
               "kv_bytes_doc": b.doc.kv_bytes(),
               "weights_bytes": b.weight_bytes, "results": results}
        if args.hol:
            out["head_of_line"] = h = b.head_of_line()
            print(f"  head-of-line: short question TTFT idle p50 {h['idle_p50_ms']:.1f} ms; during a "
                  f"{h['hol_tokens']}-token prompt p50 {h['busy_p50_ms']:.1f} ms p99 {h['busy_p99_ms']:.1f} ms "
                  f"({h['p99_over_idle_p50']:.2f}x idle p50, n={h['busy_n']}, long prompt {h['long_prompt_s']:.2f} s "
                  f"in {h['steps']} steps: p50 {h['step_p50_ms']:.1f} ms, max {h['step_max_ms']:.1f} ms)")
    finally:
        b.loop.shutdown()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
