"""Strict page recall on the native set, through the same plan path as ``bench.bench_selection``.

For each document and size the index is built once (``DocumentIndex`` with its
defaults); each question is then planned under each budget (``SelectionPolicy``:
1 sink page, the last 256 tokens, pages by rank up to the budget, as
bench_selection does) in three settings:

* ``default``: method ``hybrid`` with the contract-vocabulary expansion (the product path);
* ``no-expansion``: ``hybrid`` with ``expansion_weight = 0``;
* ``cosine``: method ``dense`` (cosine only; it never expands).

A question counts when the plan holds every page of one of its answer sentences.
The rank given for a miss is that of the answer's worst page in the full ranking
(1-based; the best alternative when there are several).

    python -m bench.devsets.native.run --sizes 32k,128k --out bench/results/selection_native.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_selection import load_tokenizer
from bench.devsets.native.build import SIZES, SOURCES, build

SETTINGS = {  # name -> (method, expansion on)
    "default": ("hybrid", True),
    "no-expansion": ("hybrid", False),
    "cosine": ("dense", False),
}


def evaluate(doc, tok, budgets: list[float], cache: Path, recent_tokens: int = 256) -> list[dict]:
    """One record per (question, setting): rank and a hit per budget."""
    from agentctx.retrieval.answer_type import question_types
    from agentctx.retrieval.document import DocumentIndex
    from agentctx.retrieval.embedding import Embedder
    from agentctx.retrieval.expansion import expansion_terms
    from agentctx.retrieval.policy import SelectionPolicy, plan

    offsets = [tuple(o) for o in tok(doc.text, return_offsets_mapping=True, add_special_tokens=False)[
        "offset_mapping"]]
    t0 = time.perf_counter()
    idx = DocumentIndex(doc.text, offsets, embedder=Embedder(cache_dir=cache))
    print(f"  {doc.doc} {doc.target_tokens}: {idx.num_tokens:,} tokens, {idx.num_pages} pages, "
          f"{idx.stats.num_passages} passages, index {time.perf_counter() - t0:.0f}s", flush=True)
    default_weight = idx.expansion_weight
    out = []
    for setting, (method, expand) in SETTINGS.items():
        idx.expansion_weight = default_weight if expand else 0.0
        try:
            for q in doc.questions:
                wants = [list(a.pages()) for a in q.answers]
                res = idx.retrieve(q.question, idx.num_pages, method=method)
                pos = {p: i for i, p in enumerate(res.pages.tolist())}
                ranks = [max(pos.get(p, idx.num_pages) for p in w) + 1 for w in wants]
                best = min(range(len(wants)), key=lambda i: ranks[i])
                top = res.evidence[0]
                rec = {"id": q.id, "doc": q.doc, "size": doc.target_tokens, "setting": setting,
                       "pages": idx.num_pages, "answer_pages": wants[best], "rank": ranks[best],
                       "types": sorted(question_types(q.question)),
                       "expansion": expansion_terms(q.question) if expand else "",
                       "top_page": int(res.pages[0]), "top_evidence": doc.text[top[0]:top[1]][:160],
                       "hits": {}}
                for b in budgets:
                    pol = SelectionPolicy(budget_fraction=b, top_k_pages=None, sink_pages=1,
                                          recent_tokens=recent_tokens, page_size_tokens=idx.page_size,
                                          method=method)
                    p = plan(q.question, idx, idx.num_pages, idx.last_page_len, pol)
                    rec["hits"][str(b)] = any(all(pg in p.pages for pg in w) for w in wants)
                if all(rec["hits"].values()):  # the best page's evidence is kept for misses only
                    del rec["top_page"], rec["top_evidence"]
                out.append(rec)
        finally:
            idx.expansion_weight = default_weight
    return out


def table(recs: list[dict], budgets: list[float]) -> str:
    head = ["size", "setting", "questions"] + [f"recall @{b:.0%}" for b in budgets] + [
        f"{d} @{budgets[-1]:.0%}" for d in SOURCES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sorted({r["size"] for r in recs}):
        for setting in SETTINGS:
            rs = [r for r in recs if r["size"] == size and r["setting"] == setting]
            if not rs:
                continue
            cells = [f"{size // 1024}K", setting, str(len(rs))]
            cells += [f"{sum(r['hits'][str(b)] for r in rs) / len(rs):.2f}" for b in budgets]
            for d in SOURCES:
                ds = [r for r in rs if r["doc"] == d]
                cells.append(f"{sum(r['hits'][str(budgets[-1])] for r in ds)}/{len(ds)}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32k,128k", help="comma list of 32k, 128k")
    ap.add_argument("--docs", default="", help=f"comma list (default: all of {', '.join(SOURCES)})")
    ap.add_argument("--budgets", default="0.05,0.12", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--cache-dir", default="", help="embedding cache root (default: a fresh temp dir)")
    ap.add_argument("--out", default="", help="write JSON results here")
    args = ap.parse_args(argv)

    tok = load_tokenizer()
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="agentctx-native-"))
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; budgets {args.budgets}",
          flush=True)
    recs: list[dict] = []
    for size in args.sizes.split(","):
        for d in (args.docs.split(",") if args.docs else SOURCES):
            recs += evaluate(build(d, SIZES[size], tok), tok, args.budgets, cache)
    md = table(recs, args.budgets)
    print("\n" + md + "\n")
    for r in recs:
        missed = [b for b in args.budgets if not r["hits"][str(b)]]
        if missed:
            print(f"  miss @{','.join(f'{b:.0%}' for b in missed)} [{r['size'] // 1024}K {r['setting']}] "
                  f"{r['id']}: rank {r['rank']}/{r['pages']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"argv": sys.argv, "machine": platform.machine(),
                                              "cpus": os.cpu_count(), "markdown": md, "records": recs},
                                             indent=0))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
