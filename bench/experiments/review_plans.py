"""The attend plans (page sets) that the document review's own steps and QA questions use over one long document.

    python bench/experiments/review_plans.py [--doc gpl-3.0] [--size 128k] [--budget 0.12] \
        [--out bench/results/review_plans_128k.json]

Writes ``{"document", "tokens", "pages", "page_size", "budget", "questions", "plans"}`` for
``bench/bench_scheduler.py --plans FILE --budgets real``, which gives agent i plan i (mod the list)
and reads each page of the plans' union once per decode step: the union's share of the document
is what a batch of such agents costs in KV reads.

The document is the native dev set's (bench/devsets/native, ``build``): one real source document
(GPL-3.0 by default, whose 11 questions are the set's most) whole inside ~125K tokens of other real
licence texts, copyright files and manuals. It was chosen over the bundled agreements
(bench/devsets/contracts, ~10K tokens each) because it is built deterministically at exactly the
target size with the Gemma tokenizer and comes with questions a user would ask of it; the clause
queries still find real clauses there (licences have termination, liability, governing-law and
assignment-like terms), as they would in a data room of mixed documents.

Questions, in the order agents start them: first the review's clause steps (one per kind of
agentctx/agents/taxonomy.py, each planning with its ``query``, as ``extract_clause`` does; the
review runs them first, 4 at a time), then the dev set's QA questions for that document (the QA
agent plans with the question text itself, agentctx/agents/answering.py). The review's other
steps are left out: summaries read their own section's pages (no retrieval) and a risk step
plans with the quote its clause step found, which needs the clause step's pick.

Plans come from the runtime's path without the model or Ray: the Gemma tokenizer's offsets, a
``DocumentIndex`` (MiniLM + BM25, as RetrievalService builds it) and ``retrieval.policy.plan``
under the runtime's default policy (agentctx/config.py: 1 sink page, 256 recent tokens) with the
budget set as ``agentctx review --budget`` sets it. The embedding cache is a fresh temp dir by
default: int8 vectors depend on what the cache held (docs/SELECTION.md), so this keeps the plans
a function of the text.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def union_share(plans: list[list[int]], num_pages: int) -> float:
    return len(set().union(*map(set, plans))) / num_pages if plans else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", default="gpl-3.0", help="native dev set source (bench/devsets/native/build.py SOURCES)")
    ap.add_argument("--size", default="128k", help="native dev set size: 32k or 128k")
    ap.add_argument("--budget", type=float, default=0.12, help="fraction of the document's tokens a plan may read")
    ap.add_argument("--cache-dir", default="", help="embedding cache (default: a fresh temp dir)")
    ap.add_argument("--out", default="", help="write the plans as JSON here")
    args = ap.parse_args(argv)

    from agentctx.agents.taxonomy import CLAUSE_TAXONOMY
    from agentctx.config import AgentctxConfig
    from agentctx.retrieval.document import DocumentIndex
    from agentctx.retrieval.embedding import Embedder
    from agentctx.retrieval.policy import plan
    from bench.bench_selection import load_tokenizer
    from bench.devsets.native.build import SIZES, build

    tok = load_tokenizer()
    t0 = time.perf_counter()
    doc = build(args.doc, SIZES[args.size], tok)
    offsets = [tuple(o) for o in tok(doc.text, return_offsets_mapping=True, add_special_tokens=False)[
        "offset_mapping"]]
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="agentctx-plans-"))
    idx = DocumentIndex(doc.text, offsets, embedder=Embedder(cache_dir=cache))
    print(f"{args.doc} {args.size}: {idx.num_tokens:,} tokens, {idx.num_pages} pages, "
          f"{idx.stats.num_passages} passages; built and indexed in {time.perf_counter() - t0:.0f}s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)

    # The runtime's policy with a budget, exactly as the CLI's --budget derives it (entrypoints/cli.py).
    policy = AgentctxConfig().retrieval.model_copy(update={"budget_fraction": args.budget, "top_k_pages": None})
    if policy.page_size_tokens != idx.page_size:
        raise SystemExit(f"policy page size {policy.page_size_tokens} != index page size {idx.page_size}")
    # At 128K, 12% is far above the sink page + recent window, so review_steps.plan_for's fallback for
    # short documents (top-1 instead of the budget) never applies and plan() is what the steps call.
    asks = [{"id": f"clause:{k.kind}", "text": k.query} for k in CLAUSE_TAXONOMY.values()]
    answers = {}
    for q in doc.questions:
        asks.append({"id": f"qa:{q.id}", "text": q.question})
        answers[f"qa:{q.id}"] = [list(a.pages(idx.page_size)) for a in q.answers]

    plans: list[list[int]] = []
    for a in asks:
        p = plan(a["text"], idx, idx.num_pages, idx.last_page_len, policy)
        plans.append(list(p.pages))
        a["retrieved"] = len(p.pages_with("retrieved")) + len(p.pages_with("neighbor"))
        if a["id"] in answers:  # a sanity check of the plans: does the QA plan hold its answer?
            a["answer_in_plan"] = any(all(pg in p.pages for pg in w) for w in answers[a["id"]])

    n = idx.num_pages
    sizes = [len(p) for p in plans]
    print(f"{len(plans)} plans ({len(CLAUSE_TAXONOMY)} clause steps, {len(answers)} QA questions), "
          f"budget {args.budget:.0%}: mean {statistics.mean(sizes):.1f} pages per plan "
          f"({statistics.mean(sizes) / n:.1%} of {n}), min {min(sizes)}, max {max(sizes)}")
    for k in (4, 16, len(plans)):
        head = plans[:k]
        print(f"  first {len(head):2d} plans: union {len(set().union(*map(set, head)))} pages = "
              f"{union_share(head, n):.1%} of the document (sum of plans {sum(map(len, head))} pages)")
    hits = [a["answer_in_plan"] for a in asks if "answer_in_plan" in a]
    print(f"  QA answer in its plan: {sum(hits)}/{len(hits)}")

    if args.out:
        out = {"document": f"native/{args.doc}-{args.size}", "tokens": idx.num_tokens, "pages": n,
               "page_size": idx.page_size, "budget": args.budget,
               "policy": policy.model_dump(), "argv": sys.argv, "questions": asks, "plans": plans}
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
