"""The QA agent's cited span on real documents: does its quote overlap the planted fact?

Free-form answers of the embedded 270M base model are no yardstick (it matched none of the planted
answers with any attention), so this scores what a reviewer checks first: the quote the agent cites.
For each question of the selection dev set (bench/devsets/selection, real texts with planted facts
and paraphrased questions) at one size, the QA role runs with the 12% plan and with dense attention
over the same prefilled context. A hit is a cited span that overlaps the fact's sentence.

Reported per mode: hits of the agent's quote; hits of retrieval's first candidate alone (no model);
the share of questions whose fact is among the candidates at all (the ceiling of any choice). Each
option's model score is saved, so the choice's weights can be re-scored offline (--rescore).

    python -m bench.bench_qa --size 32k --out bench/results/qa_span_32k.json
    python -m bench.bench_qa --rescore bench/results/qa_span_32k.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def overlaps(a: int, b: int, s: int, e: int) -> bool:
    return a < e and s < b


def run(size: str, budget: float, max_new_tokens: int, families: list[str] | None) -> dict:
    import bench.devsets.selection as B
    from agentctx.agents.base import AgentSpec, AgentTask
    from agentctx.agents.roles import QuestionAnswerer
    from agentctx.config import AgentctxConfig
    from agentctx.runtime import Runtime
    from bench.bench_selection import load_tokenizer

    tok = load_tokenizer()
    cfg = AgentctxConfig()
    cfg.retrieval = cfg.retrieval.model_copy(update={"budget_fraction": budget, "top_k_pages": None})
    rows = []
    with Runtime.start(cfg) as rt:
        for fam in families or B.families():
            doc = B.build(fam, B.SIZES[size], tok)
            t0 = time.perf_counter()
            ctx, _ = rt.load_context(doc.text, tenant=f"qa-bench-{size}")
            print(f"{fam} {size}: {ctx.info.num_tokens} tokens loaded in {time.perf_counter() - t0:.0f} s", flush=True)
            try:
                for mode in ("selected", "dense"):
                    agent = QuestionAnswerer(AgentSpec(role="qa", dense=mode == "dense", max_new_tokens=max_new_tokens))
                    for f in doc.facts:
                        t1 = time.perf_counter()
                        ans = agent.run(ctx, AgentTask(question=f.question))
                        c = ans.citation
                        row = {"family": fam, "fact": f.id, "mode": mode, "chosen_by": ans.chosen_by,
                               "hit": bool(c and overlaps(c.char_start, c.char_end, f.char_start, f.char_end)),
                               "options": [{**o.model_dump(), "on_fact": overlaps(o.char_start, o.char_end,
                                                                                  f.char_start, f.char_end)}
                                           for o in ans.options],
                               "answer": ans.answer, "expected": f.answer, "s": round(time.perf_counter() - t1, 2)}
                        rows.append(row)
                        print(json.dumps({k: row[k] for k in ("family", "fact", "mode", "hit", "chosen_by", "s")}),
                              flush=True)
                    print(f"  {mode}: utilization {agent.stats.utilization:.3f}", flush=True)
            finally:
                ctx.close()
    return {"size": size, "budget": budget, "machine": f"{platform.node()} {os.cpu_count()} CPUs",
            "model": "gemma-3-270m (embedded)", "rows": rows}


def choose(options: list[dict], weight: float, prior: float) -> dict | None:
    """The pick under (weight, prior): the agent's own rule (options are in retrieval's order)."""
    from agentctx.agents.answering import choose_quote

    if not options:
        return None
    return options[choose_quote([o["model_score"] for o in options], weight, prior)[0]]


def summary(data: dict, weight: float | None = None, prior: float | None = None) -> list[dict]:
    out = []
    for mode in ("selected", "dense"):
        rows = [r for r in data["rows"] if r["mode"] == mode]
        if not rows:
            continue
        n = len(rows)
        first = sum(bool(r["options"]) and r["options"][0]["on_fact"] for r in rows)
        ceiling = sum(any(o["on_fact"] for o in r["options"]) for r in rows)
        if weight is None:
            hits = sum(r["hit"] for r in rows)
        else:
            hits = sum(bool((p := choose(r["options"], weight, prior)) and p["on_fact"]) for r in rows)
        model_only = sum(bool((p := choose(r["options"], 1.0, 0.0)) and p["on_fact"]) for r in rows)
        out.append({"mode": mode, "questions": n, "agent_quote": round(hits / n, 3),
                    "retrieval_first": round(first / n, 3), "model_only": round(model_only / n, 3),
                    "candidates_hold_fact": round(ceiling / n, 3)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="32k", choices=["32k", "128k", "1m"])
    ap.add_argument("--budget", type=float, default=0.12)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--families", default=None, help="comma-separated; default all")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rescore", type=Path, default=None, help="re-score a saved run over a grid of weights")
    args = ap.parse_args()
    if args.rescore:
        data = json.loads(args.rescore.read_text())
        for w in (0.0, 0.25, 0.5, 1.0, 2.0):
            for p in (0.0, 0.25, 0.5, 1.0):
                print(w, p, json.dumps(summary(data, w, p)))
        return
    data = run(args.size, args.budget, args.max_new_tokens, args.families.split(",") if args.families else None)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1))
    print("| mode | questions | agent's quote on the fact | retrieval's first candidate | model's pick alone | "
          "fact among candidates |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in summary(data):
        print(f"| {s['mode']} | {s['questions']} | {s['agent_quote']:.2f} | {s['retrieval_first']:.2f} | "
              f"{s['model_only']:.2f} | {s['candidates_hold_fact']:.2f} |")


if __name__ == "__main__":
    main()
