"""Risk rationales of the embedded model: the assessor's prompt vs a worked example, side by side.

The risk assessor fills {"severity", "rationale", "recommendation"} after its prompt. With the
270M base model many rationales are not about the clause. This script fills the fields for the
15 labelled clauses of bench/experiments/risk_calibration.py under two prompts, over the bundled sample
contract's KV (pages 0-2, as that script does). "plain" is the assessor's own prompt
(agentctx.agents.review_steps.risk_prompt); "example" puts one worked example (a warranty clause, not
in the labelled set) before it. Each free text is counted as:

* echo: repeats the prompt's own instruction line, or is mostly (>= 80% of its characters) a
  verbatim piece of the clause;
* example: at least half of it a verbatim piece of the worked example;
* empty: nothing after stripping;
* on-topic: shares a content word (>= 5 letters, not a party or contract word) with the clause;
* off-topic: anything else;

and the severity accuracy against the labels (an example in the prompt could bias the choice).

    python bench/experiments/risk_rationale.py [--model PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from difflib import SequenceMatcher
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.risk_calibration import LABELLED, SAMPLE_PAGES, sample_engine  # noqa: E402

EXAMPLE = (
    'Clause (warranty): "The Supplier gives no warranty that the Software will be free of defects."\n'
    "Risk review of this clause for the Customer, as JSON:\n"
    '{"severity": "medium", "rationale": "The Customer has no remedy if the Software does not work.", '
    '"recommendation": "Ask for a twelve-month warranty that the Software performs as described."}\n\n'
)
# Words every clause and every answer share: they say nothing about being on topic.
_COMMON = {"customer", "supplier", "clause", "agreement", "services", "party", "parties", "shall", "which"}


def _words(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{5,}", s.lower())} - _COMMON


def _mostly_from(t: str, source: str, share: float = 0.8) -> bool:
    m = SequenceMatcher(None, t, source, autojunk=False).find_longest_match(0, len(t), 0, len(source))
    return m.size >= share * len(t)


def classify(text: str, clause: str, instruction: str) -> str:
    t = text.strip()
    if not t:
        return "empty"
    if "as json" in t.lower() or SequenceMatcher(None, t.lower(), instruction.lower()).ratio() > 0.6:
        return "echo"
    if _mostly_from(t, clause):
        return "echo"
    if _mostly_from(t, EXAMPLE, 0.5):
        return "example"
    return "on-topic" if _words(t) & _words(clause) else "off-topic"


class _EngineLLM:
    """structured.LLM over fixed pages of one prefilled context."""

    def __init__(self, engine, context_id: str, pages: tuple[int, ...]):
        self.engine, self.cid, self.pages = engine, context_id, pages

    def complete(self, prompt: str, *, max_new_tokens: int, stop: tuple[str, ...]) -> str:
        from agentctx.serving.types import GenerateRequest

        return self.engine.generate(GenerateRequest(self.cid, prompt, self.pages, max_new_tokens=max_new_tokens,
                                                    stop=stop)).text

    def scores(self, prompt: str, options: list[str]) -> list[float]:
        from agentctx.serving.types import ScoreRequest

        return self.engine.score(ScoreRequest(self.cid, prompt, tuple(options), self.pages))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from agentctx.agents.review_steps import risk_prompt
    from agentctx.findings import RiskFields
    from agentctx.structured import fill_fields

    engine = sample_engine(args.model)
    llm = _EngineLLM(engine, "sample", SAMPLE_PAGES)
    rows, summary = [], {}
    for variant in ("plain", "example"):
        counts: dict[str, int] = {}
        for label, kind, quote in LABELLED:
            body = (EXAMPLE if variant == "example" else "") + risk_prompt(kind, quote)
            fields = fill_fields(llm, "\n\n" + body, RiskFields, max_chars={"rationale": 240, "recommendation": 240})
            instruction = body.strip().splitlines()[-1]
            verdict = {f"{f}_verdict": classify(getattr(fields, f), quote, instruction)
                       for f in ("rationale", "recommendation")}
            for f, v in verdict.items():
                key = f"{f.removesuffix('_verdict')} {v}"
                counts[key] = counts.get(key, 0) + 1
            rows.append({"variant": variant, "kind": kind, "label": label, "severity": fields.severity,
                         "rationale": fields.rationale, "recommendation": fields.recommendation, **verdict})
        summary[variant] = dict(sorted(counts.items()))
        mine = [r for r in rows if r["variant"] == variant]
        # Severity is a choice the example could bias (its own is "medium"): report it too.
        summary[variant]["severity accuracy"] = round(sum(r["severity"] == r["label"] for r in mine) / len(mine), 2)
    print(f"{engine.model_id} on {engine.runner.device}: {len(LABELLED)} labelled clauses per variant")
    for variant, counts in summary.items():
        print(f"  {variant:>10}: {counts}")
    for r in rows:
        print(f"    [{r['variant']}] {r['kind']:<22} {r['rationale_verdict']:>9} {r['rationale'][:70]!r} | "
              f"{r['recommendation'][:50]!r}")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": engine.model_id, "summary": summary, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
