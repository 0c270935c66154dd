"""Risk severity on hand-labelled clauses: the raw option choice vs a calibrated one, side by side.

The risk assessor picks severity by the log-probability of each option after its prompt. A
small base model prefers some options whatever the clause (in the main job: "high" for all
nine clauses). Contextual calibration (Zhao et al., 2021, "Calibrate Before Use") subtracts
each option's log-probability after the same prompt with the clause replaced by a
content-free placeholder. This script scores 15 clauses labelled low / medium / high from the
Customer's side, both ways, over the bundled sample contract's KV.

    python bench/experiments/risk_calibration.py [--model PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

LABELLED = [
    ("low", "notices", "Notices shall be given in writing to the addresses set out above."),
    ("low", "interpretation", "Headings are for convenience only and do not affect the interpretation of this "
                              "Agreement."),
    ("low", "counterparts", "This Agreement may be signed in any number of counterparts."),
    ("low", "costs", "Each Party shall bear its own costs of negotiating and entering into this Agreement."),
    ("low", "reporting", "The Supplier shall send the Customer a monthly report on the Services."),
    ("medium", "termination", "Either Party may terminate this Agreement on ninety (90) days' written notice."),
    ("medium", "payment", "Invoices are payable within thirty (30) days of receipt."),
    ("medium", "fees", "The Supplier may increase its fees once a year by no more than five per cent."),
    ("medium", "subcontracting", "The Supplier may use subcontractors with the Customer's consent, which shall not "
                                 "be unreasonably withheld."),
    ("medium", "confidentiality", "The confidentiality obligations survive for three (3) years after termination."),
    ("high", "indemnity", "The Customer shall indemnify the Supplier against all losses of any kind, without limit."),
    ("high", "liability cap", "The Supplier's total liability under this Agreement shall not exceed one hundred "
                              "dollars."),
    ("high", "termination", "The Supplier may terminate this Agreement at any time without notice and keep all "
                            "fees paid."),
    ("high", "intellectual property", "The Customer irrevocably assigns to the Supplier all intellectual property in "
                                      "the Customer's data."),
    ("high", "changes", "The Supplier may change the Services and the fees at any time without notice to the "
                        "Customer."),
]
OPTIONS = ("low", "medium", "high")
NEUTRAL = "N/A"


def risk_prompt(kind: str, quote: str) -> str:
    """What RiskAssessor scores for the severity field (its body, then the JSON skeleton)."""
    from agentctx.agents.review_steps import risk_prompt as assessor_prompt

    return "\n\n" + assessor_prompt(kind, quote) + '{"severity": "'


# A few pages of the bundled sample's KV as context; the clause itself is in the prompt.
SAMPLE_PAGES = (0, 1, 2)


def sample_engine(model: str | None):
    """A LocalEngine with the bundled sample contract prefilled as context "sample"."""
    from agentctx.serving.engine import LocalEngine

    engine = LocalEngine(model)
    text = (Path(__file__).resolve().parents[2] / "agentctx/samples/sample_contract.txt").read_text()
    engine.prefill("sample", engine.tokenize_document(text), progress=False)
    return engine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from agentctx.serving.types import ScoreRequest

    engine = sample_engine(args.model)
    pages = SAMPLE_PAGES
    opts = tuple(o + '"' for o in OPTIONS)

    def scores(kind: str, quote: str) -> list[float]:
        return engine.score(ScoreRequest("sample", risk_prompt(kind, quote), opts, pages))

    rows = []
    for label, kind, quote in LABELLED:
        raw = scores(kind, quote)
        base = scores(kind, NEUTRAL)
        cal = [r - b for r, b in zip(raw, base)]
        rows.append({"label": label, "kind": kind, "raw": OPTIONS[max(range(3), key=raw.__getitem__)],
                     "calibrated": OPTIONS[max(range(3), key=cal.__getitem__)]})
    n = len(rows)
    summary = {}
    for way in ("raw", "calibrated"):
        acc = sum(r[way] == r["label"] for r in rows) / n
        summary[way] = {"accuracy": acc, "predicted": dict(Counter(r[way] for r in rows))}
    print(f"{engine.model_id} on {engine.runner.device}: {n} labelled clauses (5 per class), chance = 0.33")
    for way, s in summary.items():
        print(f"  {way:>10}: accuracy {s['accuracy']:.2f}  predicted {s['predicted']}")
    for r in rows:
        print(f"    {r['label']:>6} {r['kind']:<22} raw {r['raw']:<6} calibrated {r['calibrated']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": engine.model_id, "summary": summary, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
