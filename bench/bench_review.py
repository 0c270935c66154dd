"""Review quality on synthetic contracts with planted clauses: block-selected vs dense attention.

For each context length, one synthetic contract (bench/contracts.py) is loaded
once (one prefill); the clause-extraction step of the document review runs twice
over the same shared KV: with block selection (the default policy) and with dense
attention over every page. A finding is correct when its cited span overlaps a
planted clause of the same kind.

    python bench/bench_review.py --tokens 8000,32000 --out bench/results/review.json

Reports per run: clause recall (kinds found correctly / kinds planted), precision
(correct findings / findings), verified-citation share, effective context
utilization, wall time of the step. CPU, embedded Gemma 3 270M.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentctx.agents import CLAUSE_KINDS, AgentSpec  # noqa: E402
from agentctx.config import AgentctxConfig  # noqa: E402
from agentctx.pipelines.dsl import Pipeline  # noqa: E402
from agentctx.pipelines.runner import PipelineRunner  # noqa: E402
from agentctx.runtime import Runtime  # noqa: E402
from bench.contracts import generate_contract  # noqa: E402


def score(findings: list[dict], contract) -> dict:
    planted = {k: contract.clauses_of(k) for k in CLAUSE_KINDS}
    kinds_planted = [k for k, v in planted.items() if v]
    correct_kinds, n_present, n_correct, n_verified = set(), 0, 0, 0
    for f in findings:
        if not f["present"] or not f.get("citation"):
            continue
        n_present += 1
        c = f["citation"]
        n_verified += bool(c["verified"])
        hit = any(c["char_start"] < p.char_end and p.char_start < c["char_end"] for p in planted.get(f["kind"], []))
        if hit:
            n_correct += 1
            correct_kinds.add(f["kind"])
    return {
        "recall": len(correct_kinds) / len(kinds_planted) if kinds_planted else 0.0,
        "precision": n_correct / n_present if n_present else 0.0,
        "verified_share": n_verified / n_present if n_present else 0.0,
        "findings": n_present,
        "kinds_planted": len(kinds_planted),
    }


def embedding_only(ctx, contract, n: int) -> dict:
    """Ablation: the same candidate sentences, picked by embedding similarity alone (no LLM)."""
    from agentctx.agents.roles import candidate_sentences, cite, clause_candidate_pages
    from agentctx.agents.taxonomy import CLAUSE_TAXONOMY

    t0 = time.perf_counter()
    findings = []
    for k in CLAUSE_KINDS:
        kind = CLAUSE_TAXONOMY[k]
        ranking = ctx.plan(kind.query)
        spans = candidate_sentences(ctx, clause_candidate_pages(ranking))
        if not spans:
            continue
        texts = [ctx.text[s:e] for s, e in spans]
        sims = ctx.rank_texts(kind.query + " " + kind.description, texts)
        best = max(range(len(texts)), key=sims.__getitem__)
        c = cite(ctx, texts[best], ranking)
        findings.append({"kind": k, "present": c is not None, "citation": c.model_dump() if c else None})
    return {"tokens": ctx.info.num_tokens, "pages": ctx.info.num_pages, "mode": "embedding-only", "load_s": None,
            "prefill_s": None, "step_s": round(time.perf_counter() - t0, 1), "utilization": 0.0, "errors": 0,
            **score(findings, contract)}


def run(tokens: list[int], seed: int, budget: float | None) -> list[dict]:
    cfg = AgentctxConfig()
    if budget is not None:
        cfg.retrieval = cfg.retrieval.model_copy(update={"budget_fraction": budget, "top_k_pages": None})
    rows = []
    with Runtime.start(cfg) as rt:
        for n in tokens:
            contract = generate_contract(n, num_needles=4, seed=seed)
            t0 = time.perf_counter()
            ctx, load = rt.load_context(contract.text, tenant=f"bench-{n}")
            t_load = time.perf_counter() - t0
            for mode in ("selected", "dense"):
                p = Pipeline(f"clauses-{mode}", max_concurrency=cfg.max_concurrent_agents)
                p.step("clauses", AgentSpec(role="clause_extractor", dense=(mode == "dense"), max_new_tokens=80),
                       over=[{"clause": k} for k in CLAUSE_KINDS], num_agents=3)
                t1 = time.perf_counter()
                res = PipelineRunner(rt, progress=False).run(p.spec, ctx.context_id, ctx.tenant)
                step = res.steps["clauses"]
                util = [f.get("utilization", 1.0) for f in step.ok_outputs]
                row = {"tokens": ctx.info.num_tokens, "pages": ctx.info.num_pages, "mode": mode,
                       "load_s": round(t_load, 1), "prefill_s": round(load.prefill_s, 1),
                       "step_s": round(time.perf_counter() - t1, 1),
                       "utilization": round(sum(util) / len(util), 3) if util else None,
                       "errors": len(step.errors), **score(step.ok_outputs, contract)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            rows.append(embedding_only(ctx, contract, n))
            print(json.dumps(rows[-1]), flush=True)
            rows[-1]["prefills_on_replica"] = rt.client.info()["prefills"]
            ctx.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="8000,32000", help="approximate context lengths, comma list")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--budget", type=float, default=None, help="budget fraction (default: policy top-k)")
    ap.add_argument("--out", default="bench/results/review.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = run([int(x) for x in args.tokens.split(",")], args.seed, args.budget)
    print("\n| tokens | pages | attention | utilization | recall | precision | verified | findings | step s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tokens']} | {r['pages']} | {r['mode']} | {r['utilization']} | {r['recall']:.2f} | "
              f"{r['precision']:.2f} | {r['verified_share']:.2f} | {r['findings']} | {r['step_s']} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
