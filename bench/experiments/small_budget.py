"""Issue 32 diagnostic: strict recall at small budgets on the three dev sets, per tuning/check half,
with each miss's answer rank and what outranks it.

The three sets are planned exactly as their own runners plan them (``bench.bench_selection`` for
the planted and case-file sets, ``bench.devsets.native.run`` for the native set: default policy,
1 sink page, the last 256 tokens, hybrid). Embedding caches live under ``--cache-dir`` and are
laid out as those runners lay them out (one per document for planted / case file, one shared by
the native documents), so the first run is cold like theirs and later runs read the same vectors.

**Split** (fixed before any change, BENCHMARKS §5): within each set, in the order of its facts
file (planted: per family, L01..L16, D01.., G01..), the 1st, 3rd, 5th ... question is *tuning*, the
2nd, 4th ... is *check*. Only tuning misses are printed unless ``--show-check``.

    python -m bench.experiments.small_budget --cache-dir /tmp/sb-cache --out /tmp/sb.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_selection import _kwargs, fact_pages, load_tokenizer  # noqa: E402


@dataclass
class Q:
    set: str
    id: str
    half: str  # "tuning" | "check"
    question: str
    wants: list[list[int]]  # alternatives, each a list of pages that must all be in the plan


def _half(i: int) -> str:
    return "tuning" if i % 2 == 0 else "check"


def _offsets(tok, text: str) -> list[tuple[int, int]]:
    return [tuple(o) for o in tok(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]]


def docs(tok, size: str, sets: list[str]):
    """Yield (set, doc name, text, offsets, questions, cache key)."""
    from bench.devsets import casefile, selection

    # The planted and case-file sets are built alike: families, a build per size, facts with spans.
    for set_name, module in (("planted", selection), ("casefile", casefile)):
        if set_name not in sets:
            continue
        for fam in module.families():
            d = module.build(fam, module.SIZES[size], tok)
            offs = _offsets(tok, d.text)
            qs = [Q(set_name, f.id, _half(i), f.question, [fact_pages(offs, f.char_start, f.char_end, 256)])
                  for i, f in enumerate(d.facts)]
            yield set_name, fam, d.text, offs, qs, f"{fam}-{size}"
    if "native" in sets:
        from bench.devsets.native.build import SIZES, SOURCES, build, load_questions

        order = {q.id: i for i, q in enumerate(load_questions())}
        for name in SOURCES:
            d = build(name, SIZES[size], tok)
            offs = _offsets(tok, d.text)
            qs = [Q("native", q.id, _half(order[q.id]), q.question, [list(a.pages()) for a in q.answers])
                  for q in d.questions]
            yield "native", name, d.text, offs, qs, "native-shared"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="32k")
    ap.add_argument("--sets", default="planted,native,casefile")
    ap.add_argument("--budgets", default="0.05,0.12", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--show-check", action="store_true", help="also print the check half's misses")
    ap.add_argument("--recent-tokens", type=int, default=256)
    ap.add_argument("--index", default="", type=_kwargs, help="DocumentIndex keyword overrides, k=v,k=v")
    ap.add_argument("--policy", default="", type=_kwargs, help="SelectionPolicy overrides, k=v,k=v")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    from agentctx.retrieval.document import DocumentIndex
    from agentctx.retrieval.embedding import Embedder
    from agentctx.retrieval.policy import SelectionPolicy, plan

    tok = load_tokenizer()
    cache = Path(args.cache_dir)
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    recs = []
    for setname, name, text, offs, qs, key in docs(tok, args.size, args.sets.split(",")):
        idx = DocumentIndex(text, offs, embedder=Embedder(cache_dir=cache / key), **args.index)
        for q in qs:
            res = idx.retrieve(q.question, idx.num_pages)
            ranked = res.pages.tolist()
            pos = {p: i for i, p in enumerate(ranked)}
            ranks = [[pos.get(p, idx.num_pages) + 1 for p in w] for w in q.wants]
            best = min(range(len(ranks)), key=lambda i: max(ranks[i]))
            rec = {"set": setname, "doc": name, "id": q.id, "half": q.half, "pages": idx.num_pages,
                   "want": q.wants[best], "ranks": ranks[best], "hits": {}, "plans": {}}
            for b in args.budgets:
                pol = SelectionPolicy(budget_fraction=b, top_k_pages=None, sink_pages=1,
                                      recent_tokens=args.recent_tokens, page_size_tokens=256, method="hybrid",
                                      **args.policy)
                p = plan(q.question, idx, idx.num_pages, idx.last_page_len, pol)
                rec["hits"][str(b)] = any(all(pg in p.pages for pg in w) for w in q.wants)
                rec["plans"][str(b)] = [f"{pg}:{r[0]}" for pg, r in zip(p.pages, p.reasons)]
            if not rec["hits"][str(args.budgets[0])]:
                worst = max(rec["ranks"])
                ahead = []
                for r in range(min(worst - 1, 8)):
                    a, e = res.evidence[r]
                    ahead.append(f"#{r + 1} p{ranked[r]} {res.scores[r]:.3f} {text[a:e][:110]!r}")
                ans = [f"p{pg} {res.scores[pos[pg]]:.3f}" if pg in pos else f"p{pg} -" for pg in rec["want"]]
                rec["ahead"] = ahead
                rec["answer"] = ans
                rec["question"] = q.question
            recs.append(rec)

    b0 = str(args.budgets[0])
    print("\n| set | half | n | " + " | ".join(f"@{float(b):.0%}" for b in args.budgets) + " |")
    print("|---|---|---|" + "---|" * len(args.budgets))
    for s in dict.fromkeys(r["set"] for r in recs):
        for h in ("tuning", "check", "all"):
            rs = [r for r in recs if r["set"] == s and (h == "all" or r["half"] == h)]
            cells = [f"{sum(r['hits'][str(b)] for r in rs) / len(rs):.2f} ({sum(r['hits'][str(b)] for r in rs)})"
                     for b in args.budgets]
            print(f"| {s} | {h} | {len(rs)} | " + " | ".join(cells) + " |")
    for r in recs:
        if r["hits"][b0] or (r["half"] == "check" and not args.show_check):
            continue
        print(f"\nMISS [{r['set']} {r['half']}] {r['id']} ({r['doc']}) ranks {r['ranks']} of {r['pages']}"
              f" plan@{float(b0):.0%} {r['plans'][b0]}\n  Q: {r['question']}\n  answer {r['answer']}")
        for a in r["ahead"]:
            print("   ", a)
    if args.out:
        Path(args.out).write_text(json.dumps(recs, indent=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
