"""Page selection on real documents: strict recall of the attend plan, index build time, plan latency.

The dev set (``bench/devsets/selection``) plants facts in real texts shipped in
Debian and PyPI packages and asks questions that paraphrase them. For each
question the runtime's policy builds an :class:`AttendPlan` under a token
budget; **strict recall** counts a question when every page its fact touches
is in the plan. The synthetic contract generator (``tests/fixtures/contracts.py``) is
run as a secondary row with ``--synthetic``.

    python -m bench.bench_selection --sizes 32k,128k --out sel.json
    python -m bench.bench_selection --sizes 1m --methods hybrid
    python -m bench.bench_selection --devset casefile --sizes 32k --methods hybrid --scope named

``--devset casefile`` runs the case-file set (``bench/devsets/casefile``: real agreements inside
real documentation); ``--scope`` plans a question that names one agreement within it (``named``:
the document ``agentctx.agents.question_scope`` finds from ``documents_of``; ``given``: the set's
own span for the questions marked as naming it). ``--index`` / ``--no-evidence-pages`` switch the
issue-32 scoring off for a before/after in one tree (``--index caption_penalty=0,clause_words=0``).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GEMMA_DIR = Path.home() / ".cache" / "agentctx" / "models" / "gemma-3-270m-q4_k_m"


@dataclass
class Row:
    """One (document, size, method) result."""

    family: str
    size: str
    method: str
    tokens: int
    pages: int
    questions: int = 0
    hits: dict[str, int] = field(default_factory=dict)  # budget -> strict hits
    ranks: list[float] = field(default_factory=list)  # rank of the fact's worst page / pages
    plan_ms: list[float] = field(default_factory=list)
    build_s: float = 0.0
    misses: list[str] = field(default_factory=list)

    def recall(self, budget: str) -> float:
        return self.hits.get(budget, 0) / max(1, self.questions)


def load_tokenizer() -> Any:
    from transformers import AutoTokenizer

    if not (GEMMA_DIR / "tokenizer.json").exists():
        raise SystemExit(f"the Gemma tokenizer is not at {GEMMA_DIR}: run `agentctx prepare-model` first")
    return AutoTokenizer.from_pretrained(str(GEMMA_DIR), local_files_only=True)


def fact_pages(offsets: list[tuple[int, int]], start: int, end: int, page_size: int) -> list[int]:
    return sorted({i // page_size for i, (s, e) in enumerate(offsets) if e > start and s < end and e > s})


def evaluate(name: str, size: str, text: str, facts: list[tuple[str, int, int]], tok: Any,
             args: argparse.Namespace, cache: Path,
             scopes: list[tuple[int, int] | None] | None = None) -> list[Row]:
    """Index ``text`` once (cold embedding cache: the build time is real), then plan every question."""
    from agentctx.retrieval.document import DocumentIndex
    from agentctx.retrieval.embedding import Embedder
    from agentctx.retrieval.policy import SelectionPolicy, plan

    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    # A fresh cache per document makes the build cold (its time is real); --cache-dir shares one.
    emb = Embedder(cache_dir=cache if args.cache_dir else cache / f"{name}-{size}")
    _ = emb.encoder  # load (and export) the encoder outside the timed build
    t0 = time.perf_counter()
    idx = DocumentIndex(text, offsets, embedder=emb, page_size=args.page_size, **args.index)
    build_s = time.perf_counter() - t0
    s = idx.stats
    print(f"  {name} {size}: {idx.num_tokens:,} tokens, {idx.num_pages} pages, {s.num_passages} passages "
          f"+ {s.num_windows} clause windows; "
          f"build {build_s:.1f}s (passages {s.chunk_seconds:.1f}, bm25 {s.lexical_seconds:.1f}, "
          f"embed {s.embed_seconds:.1f}, index {s.index_seconds:.1f}) = "
          f"{build_s / idx.num_tokens * 1e5:.1f}s per 100K tokens", flush=True)
    rows = []
    for method in args.methods:
        row = Row(name, size, method, idx.num_tokens, idx.num_pages, build_s=build_s)
        for i, (question, a, b) in enumerate(facts):
            scope = scopes[i] if scopes else None
            want = fact_pages(offsets, a, b, args.page_size)
            emb._memo.clear()  # a new question: its embedding is part of the plan's latency
            kw = {} if scope is None else {"scope": scope}
            ranked = idx.retrieve(question, idx.num_pages, method=method, **kw).pages.tolist()
            pos = {p: i for i, p in enumerate(ranked)}
            row.ranks.append(max(pos.get(p, idx.num_pages) for p in want) / idx.num_pages)
            row.questions += 1
            for budget in args.budgets:
                # A new question: its embedding (and its expansion's) is part of the plan's latency,
                # so the memo may not answer it (queries never use the disk cache).
                pol = SelectionPolicy(budget_fraction=budget, top_k_pages=None, sink_pages=1,
                                      recent_tokens=args.recent_tokens, page_size_tokens=args.page_size,
                                      method=method, evidence_pages=args.evidence_pages)
                emb._memo.clear()
                t = time.perf_counter()
                p = plan(question, idx, idx.num_pages, idx.last_page_len, pol, scope=scope)
                ms = (time.perf_counter() - t) * 1e3
                if budget == args.budgets[-1]:
                    row.plan_ms.append(ms)
                ok = all(pg in p.pages for pg in want)
                row.hits[str(budget)] = row.hits.get(str(budget), 0) + ok
                if not ok:
                    worst = max(pos.get(pg, idx.num_pages) for pg in want)
                    row.misses.append(f"@{budget:.0%} rank {worst}/{idx.num_pages} pages {want}: {question}")
        rows.append(row)
    return rows


def _kwargs(s: str) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for kv in filter(None, s.split(",")):
        k, v = kv.split("=")
        out[k.strip()] = float(v) if "." in v else int(v)
    return out


def question_scopes(doc: Any, how: str) -> list[tuple[int, int] | None] | None:
    """Per fact, the char span to plan within (``None``: the whole text)."""
    if how == "none":
        return None
    if how == "given":
        return [doc.spans[f.doc] if getattr(f, "names", False) else None for f in doc.facts]
    from agentctx.agents.question_scope import question_document
    from agentctx.retrieval.documents import documents_of

    parts = documents_of(doc.text)
    found = [question_document(f.question, parts) for f in doc.facts]
    return [(p.start, p.end) if p is not None else None for p in found]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def markdown(rows: list[Row], budgets: list[float]) -> str:
    head = ["document", "size", "tokens", "pages", "questions", "method"]
    head += [f"recall @{b:.0%}" for b in budgets] + ["median rank", "build s / 100K tok", "plan ms p50 / p95"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.family, r.size, f"{r.tokens:,}", str(r.pages), str(r.questions), r.method]
        cells += [f"{r.recall(str(b)):.2f}" for b in budgets]
        cells += [f"{statistics.median(r.ranks) * r.pages:.0f} of {r.pages}",
                  f"{r.build_s / r.tokens * 1e5:.1f}", f"{pct(r.plan_ms, 0.5):.1f} / {pct(r.plan_ms, 0.95):.1f}"]
        out.append("| " + " | ".join(cells) + " |")
    # Totals per size and method over families (the headline rows).
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.family != "synthetic":
            groups.setdefault((r.size, r.method), []).append(r)
    for (size, method), rs in groups.items():
        n = sum(r.questions for r in rs)
        cells = ["**all real**", size, "", "", str(n), method]
        cells += [f"**{sum(r.hits.get(str(b), 0) for r in rs) / max(1, n):.2f}**" for b in budgets]
        cells += ["", "", ""]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32k,128k", help="comma list of 32k, 128k, 1m")
    ap.add_argument("--families", default="", help="comma list (default: all)")
    ap.add_argument("--methods", default="hybrid,dense,lexical", type=lambda s: s.split(","))
    ap.add_argument("--budgets", default="0.05,0.12", type=lambda s: [float(x) for x in s.split(",")])
    ap.add_argument("--recent-tokens", type=int, default=256, help="policy: trailing tokens always attended "
                    "(the runtime default)")
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--synthetic", action="store_true",
                    help="also the tests/fixtures/contracts.py generator (secondary)")
    ap.add_argument("--cache-dir", default="", help="embedding cache root (default: a fresh temp dir: cold build)")
    ap.add_argument("--out", default="", help="write JSON results here")
    ap.add_argument("--devset", default="selection", choices=["selection", "casefile"], help="which dev set")
    ap.add_argument("--scope", default="none", choices=["none", "named", "given"],
                    help="plan a question naming one document within it (casefile set)")
    ap.add_argument("--index", default="", type=_kwargs, help="DocumentIndex keyword overrides, k=v,k=v")
    ap.add_argument("--no-evidence-pages", dest="evidence_pages", action="store_false",
                    help="policy: a retrieved page's evidence does not bring the pages it runs onto")
    args = ap.parse_args(argv)

    import importlib

    devset = importlib.import_module(f"bench.devsets.{args.devset}")

    tok = load_tokenizer()
    cache = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="agentctx-sel-"))
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; budgets {args.budgets}; "
          f"recent {args.recent_tokens} tokens; methods {args.methods}", flush=True)
    rows: list[Row] = []
    for size in args.sizes.split(","):
        for fam in (args.families.split(",") if args.families else devset.families()):
            doc = devset.build(fam, devset.SIZES[size], tok)
            facts = [(f.question, f.char_start, f.char_end) for f in doc.facts]
            rows += evaluate(fam, size, doc.text, facts, tok, args, cache, question_scopes(doc, args.scope))
        if args.synthetic:
            from tests.fixtures.contracts import generate_contract

            syn = generate_contract(devset.SIZES[size], max(10, devset.SIZES[size] // 1280), seed=0, tokenizer=tok)
            facts = [(n.question, n.char_start, n.char_end) for n in syn.needles]
            rows += evaluate("synthetic", size, syn.text, facts, tok, args, cache)
    table = markdown(rows, args.budgets)
    print("\n" + table)
    for r in rows:
        for m in r.misses:
            print(f"  miss [{r.family} {r.size} {r.method}] {m}")
    if args.out:
        payload = {"argv": sys.argv, "machine": platform.machine(), "cpus": os.cpu_count(),
                   "rows": [r.__dict__ for r in rows], "markdown": table}
        Path(args.out).write_text(json.dumps(payload, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
