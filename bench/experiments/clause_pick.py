"""How the clause extractor should pick its quote: the LLM's choice, the embedding ranking, or both.

For synthetic contracts with planted clause articles (tests/fixtures/contracts.py, one per seed), this
records for every clause kind the candidate sentences (those of the best-ranked retrieved pages;
with ``--sink`` also of the sink pages, as the page-based extractor did before the
structure-based one of agentctx/agents/clause_candidates.py replaced it), their MiniLM
similarity to the kind's query, the LLM's per-token log-likelihood of each of the top ``--wide``
candidates as the answer (the extractor's own prompt and attended pages), and whether each lies in a planted article of
that kind. Pick rules are then scored on those records, with no further model calls:

* ``embedding``: the most similar sentence (the extractor's shortlist head).
* ``llm@m``: the LLM's choice among the m most similar (the extractor used m = 4).
* ``z@m,w``: the highest z(LLM) + w * z(similarity) among the m most similar (z-scored within
  the shortlist).
* ``oracle@m``: a correct sentence is among the m most similar (the ceiling of any rule).

    python bench/experiments/clause_pick.py --seeds 1-10 --tokens 8000            # CPU, embedded Gemma 3 270M

Seeds are split in two halves: rules are ranked on the first (selection), and the chosen rule is
reported on the second (held out), so the choice is not fitted to the numbers it is judged by.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentctx.agents import CLAUSE_KINDS  # noqa: E402
from agentctx.agents.review_steps import clause_question  # noqa: E402
from agentctx.agents.taxonomy import CLAUSE_TAXONOMY  # noqa: E402
from agentctx.config import AgentctxConfig  # noqa: E402
from agentctx.context import Context  # noqa: E402
from agentctx.retrieval.policy import AttendPlan  # noqa: E402
from agentctx.runtime import Runtime  # noqa: E402
from tests.fixtures.contracts import generate_contract  # noqa: E402

WIDTHS = (2, 3, 4, 6)
WEIGHTS = (0.25, 0.5, 1.0, 2.0)


def _seeds(s: str) -> list[int]:
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


# The page-based extractor's candidate sources, kept here since the structure-based extractor
# (agentctx/agents/clause_candidates.py) replaced them; this study is their only user.


def _quote_source(plan: AttendPlan, max_pages: int = 4) -> list[int]:
    """Best-ranked attended pages (a sink page counts when retrieval ranked it too)."""
    if plan.retrieval is not None:
        ranked = [int(p) for p in plan.retrieval.pages if int(p) in plan.pages]
        if ranked:
            return ranked[:max_pages]
    return list(plan.pages_with("retrieved") + plan.pages_with("neighbor")) or list(plan.pages)


def clause_candidate_pages(plan: AttendPlan) -> list[int]:
    """The best-ranked retrieved pages plus the always-attended sink pages. A contract's first
    page (its parties, often its preamble) is a sink page that page-level retrieval rarely ranks:
    on 12 synthetic contracts the parties clause had no correct candidate in 9 without it and 0
    with it (this study, ``--sink``)."""
    return sorted(set(_quote_source(plan)) | set(plan.pages_with("sink")))


_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(])|\n+")
_CLAUSE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|\([a-z0-9]+\))\s+")


def candidate_sentences(ctx: Context, pages: list[int], min_chars: int = 24) -> list[tuple[int, int]]:
    """Char spans of the sentences (or lines) of the given pages, clause numbers stripped
    (the page-based extractor's candidates)."""
    spans = []
    for p in sorted(set(pages)):
        start, end = ctx.char_spans[p]
        chunk = ctx.text[start:end]
        pos = 0
        for m in list(_SENTENCE_END.finditer(chunk)) + [None]:
            stop = m.start() if m else len(chunk)
            piece = chunk[pos:stop]
            lead = _CLAUSE_NUMBER.match(piece)
            s = start + pos + (lead.end() if lead else 0)
            e = start + stop
            text = ctx.text[s:e].strip()
            if len(text) >= min_chars and not text.isupper():
                s += len(ctx.text[s:e]) - len(ctx.text[s:e].lstrip())
                spans.append((s, s + len(text)))
            pos = m.end() if m else len(chunk)
    return list(dict.fromkeys(spans))


def record(rt: Runtime, seed: int, tokens: int, wide: int, sink: bool = False) -> list[dict]:
    contract = generate_contract(tokens, num_needles=4, seed=seed)
    ctx, _ = rt.load_context(contract.text, tenant=f"pick-{seed}")
    rows = []
    try:
        for k in CLAUSE_KINDS:
            planted = contract.clauses_of(k)
            if not planted:
                continue
            kind = CLAUSE_TAXONOMY[k]
            plan = ctx.plan(kind.query)
            # --sink: the extractor's candidates (retrieved + sink pages); else retrieved pages only
            spans = candidate_sentences(ctx, clause_candidate_pages(plan) if sink else _quote_source(plan))
            if not spans:
                rows.append({"seed": seed, "kind": k, "sims": [], "llm": [], "correct": []})
                continue
            texts = [ctx.text[s:e] for s, e in spans]
            sims = ctx.rank_texts(kind.query + " " + kind.description, texts)
            top = sorted(range(len(texts)), key=lambda i: -sims[i])[:wide]
            # The extractor's prompt (Agent.prompt with no role instructions), over the same pages.
            prompt = "\n\n" + clause_question(kind)
            llm = ctx.score(prompt, [texts[i] + '"' for i in top], plan, per_token=True)
            correct = [any(spans[i][0] < p.char_end and p.char_start < spans[i][1] for p in planted) for i in top]
            rows.append({"seed": seed, "kind": k, "sims": [sims[i] for i in top], "llm": llm, "correct": correct,
                         "texts": [texts[i][:100] for i in top]})
    finally:
        ctx.close()
    return rows


def _z(xs: list[float]) -> list[float]:
    if len(xs) < 2:
        return [0.0] * len(xs)
    mu, sd = statistics.fmean(xs), statistics.pstdev(xs)
    return [(x - mu) / sd if sd > 1e-12 else 0.0 for x in xs]


def rules() -> dict[str, Callable]:
    """name -> f(sims, llm) -> index into the (similarity-sorted) shortlist, or None."""
    out = {"embedding": lambda s, l: 0 if s else None}
    for m in WIDTHS:
        out[f"llm@{m}"] = lambda s, l, m=m: max(range(min(m, len(l))), key=l.__getitem__) if l else None
        for w in WEIGHTS:
            def pick(s, l, m=m, w=w):
                if not l:
                    return None
                zl, zs = _z(l[:m]), _z(s[:m])
                return max(range(len(zl)), key=lambda i: zl[i] + w * zs[i])
            out[f"z@{m},w={w}"] = pick
    return out


def accuracy(records: list[dict], rule) -> float:
    hits = [bool(r["correct"]) and (i := rule(r["sims"], r["llm"])) is not None and r["correct"][i] for r in records]
    return sum(hits) / len(hits) if hits else 0.0


def oracle(records: list[dict], m: int) -> float:
    return sum(any(r["correct"][:m]) for r in records) / len(records) if records else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--wide", type=int, default=max(WIDTHS), help="candidates scored by the LLM per kind")
    ap.add_argument("--sink", action="store_true",
                    help="candidates from the retrieved and the sink pages, as the extractor does since "
                         "2026-12-03 (default: retrieved pages only, as before)")
    ap.add_argument("--records", default=None, help="score rules on saved records (JSON) instead of running")
    ap.add_argument("--out", default="bench/results/clause_pick.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    seeds = _seeds(args.seeds)
    if args.records:
        records = json.loads(Path(args.records).read_text())["records"]
    else:
        records = []
        t0 = time.perf_counter()
        with Runtime.start(AgentctxConfig()) as rt:
            for seed in seeds:
                records += record(rt, seed, args.tokens, args.wide, args.sink)
                print(f"[{time.perf_counter() - t0:6.0f}s] seed {seed}: {len(records)} records", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"tokens": args.tokens, "seeds": seeds, "sink": args.sink,
                                                  "records": records}, indent=1))
    half = len(seeds) // 2
    sel = [r for r in records if r["seed"] in seeds[:half]]
    held = [r for r in records if r["seed"] in seeds[half:]]
    table = {name: (accuracy(sel, f), accuracy(held, f), accuracy(records, f)) for name, f in rules().items()}
    print(f"\n{len(records)} (contract, kind) cases; selection seeds {seeds[:half]}, held-out seeds {seeds[half:]}")
    print("| rule | selection | held out | all |\n|---|---:|---:|---:|")
    for name, (a, b, c) in sorted(table.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {a:.2f} | {b:.2f} | {c:.2f} |")
    for m in WIDTHS:
        print(f"| oracle@{m} (a correct candidate in the shortlist) | {oracle(sel, m):.2f} | {oracle(held, m):.2f} "
              f"| {oracle(records, m):.2f} |")
    best = max(table, key=lambda n: table[n][0])
    print(f"\nbest on the selection seeds: {best}; held out {table[best][1]:.2f} "
          f"(llm@4, the extractor's rule: {table['llm@4'][1]:.2f}; embedding: {table['embedding'][1]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
