"""The CPU's compute dtype: float32 against bfloat16 on real weights and real text (issue 29).

A CPU with native bf16 dot products (x86 ``avx512_bf16`` / ``amx_bf16``) multiplies bf16 matrices
several times faster than fp32 ones (on the 2-core EPYC box: 68 against 558 GFLOP/s for a
1024 x 640 x 4096 product). This bench puts the whole model in each dtype side by side, in one
process, the peers alternating per document: the embedded Gemma 3 270M; for each document the first
``--context-tokens`` tokens prefilled (timed: tokens/s), then, attending every page,

* the next ``--score-tokens`` tokens of the real text, teacher-forced: perplexity, its ratio to
  float32's, the mean |dNLL| and the top-1 agreement with float32 at each scored position;
* ``--greedy-tokens`` tokens generated greedily after the first continuation token, timed
  (tokens/s of one decode row), and the share of positions equal to float32's.

Documents as bench/bench_kv_quality.py reads them (the licence dev set joined, GNU manuals).

    .venv/bin/python bench/bench_cpu_dtype.py                          # 8K context
    .venv/bin/python bench/bench_cpu_dtype.py --context-tokens 8192,32768 --out FILE
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from agentctx.serving.model_loader import load_model  # noqa: E402
from agentctx.serving.runner.model_runner import ModelRunner  # noqa: E402
from bench.bench_kv_quality import contexts, greedy, score  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context-tokens", default="8192", help="comma list of context lengths (tokens)")
    ap.add_argument("--score-tokens", type=int, default=512)
    ap.add_argument("--greedy-tokens", type=int, default=64)
    ap.add_argument("--docs", default="contracts,gnu-manuals")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    runners = {}
    for name, dt in DTYPES.items():
        loaded = load_model(None, dtype=dt, device="cpu")
        runners[name] = ModelRunner(loaded, page_size=256, prefill_chunk_tokens=1024, query_mode="eager")
    rows = []
    # loaded: the last dtype's model; its tokenizer serves both
    for doc_name, n_ctx, ctx, cont in contexts(loaded.tokenizer, args.docs, args.context_tokens,
                                               args.score_tokens):
        base = None
        for name, runner in runners.items():
            load0 = os.getloadavg()[0]
            with torch.inference_mode():
                t0 = time.perf_counter()
                doc = runner.prefill(ctx, progress=False)
                prefill_s = time.perf_counter() - t0
                nll, top = score(runner, doc, cont)
                t0 = time.perf_counter()
                gen = greedy(runner, doc, cont[0], args.greedy_tokens)
                gen_s = time.perf_counter() - t0
            if base is None:
                base = {"nll": nll, "top": top, "gen": gen, "prefill_s": prefill_s, "gen_s": gen_s}
            same = [a == b for a, b in zip(gen, base["gen"])]
            row = {"doc": doc_name, "context_tokens": n_ctx, "dtype": name,
                   "prefill_tok_s": n_ctx / prefill_s, "prefill_speedup": base["prefill_s"] / prefill_s,
                   "decode_tok_s": (args.greedy_tokens + 1) / gen_s, "decode_speedup": base["gen_s"] / gen_s,
                   "ppl": math.exp(nll.mean().item()),
                   "ppl_ratio": math.exp((nll.mean() - base["nll"].mean()).item()),
                   "nll_mad": (nll - base["nll"]).abs().mean().item(),
                   "top1_agree": (top == base["top"]).float().mean().item(),
                   "greedy_agree": sum(same) / len(same), "load_1min": round(load0, 1)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            del doc
    print("| doc | context | dtype | prefill tok/s | prefill vs fp32 | decode tok/s | decode vs fp32 | ppl | "
          "ppl ratio | mean abs dNLL | top-1 agree | greedy agree | load |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['doc']} | {r['context_tokens']} | {r['dtype']} | {r['prefill_tok_s']:.0f} | "
              f"{r['prefill_speedup']:.2f}x | {r['decode_tok_s']:.1f} | {r['decode_speedup']:.2f}x | {r['ppl']:.3f} | "
              f"{r['ppl_ratio']:.4f} | {r['nll_mad']:.4f} | {r['top1_agree']:.3f} | {r['greedy_agree']:.3f} | "
              f"{r['load_1min']} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
