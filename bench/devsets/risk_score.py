"""Score a folder of review reports' risks against the hand verdicts (issue 31's risk target).

Re-runs nothing: reads ``<dir>/<doc>.json`` (a report with ``risks``: the rules peer of
bench/bench_review.py, or ``agentctx review``'s report.json renamed by document) and matches each
risk to bench/devsets/risk_verdicts.json by rule, severity, the first 80 characters of its evidence
and its rationale. Prints per rule: risks reported, holding, false, wrong severity, wrong rationale,
and those with no verdict yet (a changed rule shows up there until someone judges it).

    python bench/bench_review.py --modes rules --devset commercial --summary '' --out out/risks/commercial
    python bench/devsets/risk_score.py out/risks/commercial/rules --set commercial
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from collections import Counter
from pathlib import Path

VERDICTS = Path(__file__).resolve().parent / "risk_verdicts.json"
COLUMNS = ("holds", "false", "wrong severity", "wrong rationale", "no verdict")


def _key(rule: str, severity: str, evidence: str, rationale: str) -> tuple:
    return rule, severity, unicodedata.normalize("NFC", evidence[:80]), rationale


def load_verdicts(path: Path, set_name: str) -> dict[str, dict[tuple, dict]]:
    sets = json.loads(path.read_text(encoding="utf-8"))["sets"]
    return {doc: {_key(v["rule"], v["severity"], v["evidence"], v["rationale"]): v for v in items}
            for doc, items in sets.get(set_name, {}).items()}


def score_dir(report_dir: Path, verdicts: dict[str, dict[tuple, dict]]) -> dict:
    """Counts per rule and in total, and the risks without a verdict (document, rule, evidence)."""
    per_rule: dict[str, Counter] = {}
    unjudged = []
    for p in sorted(report_dir.glob("*.json")):
        if p.stem == "summary":
            continue
        for r in json.loads(p.read_text(encoding="utf-8")).get("risks", []):
            cit = r.get("citation") or {}
            ev = cit.get("quote") or ""
            v = verdicts.get(p.stem, {}).get(_key(r["rule"], r["severity"], ev, r["rationale"]))
            c = per_rule.setdefault(r["rule"], Counter())
            c["reported"] += 1
            c[v["verdict"] if v else "no verdict"] += 1
            if v is None:
                unjudged.append((p.stem, r["rule"], r["severity"], ev[:80]))
    total = sum(per_rule.values(), Counter())
    return {"per_rule": per_rule, "total": total, "unjudged": unjudged}


def _rate(c: Counter, col: str) -> str:
    return f"{c[col] / c['reported']:.1%}" if c["reported"] else "-"


def print_table(result: dict, title: str) -> None:
    print(f"\n#### {title}\n")
    print("| rule | reported | holds | false | wrong severity | wrong rationale | no verdict | false rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = sorted(result["per_rule"].items()) + [("**all rules**", result["total"])]
    for rule, c in rows:
        print(f"| {rule} | {c['reported']} | " + " | ".join(str(c[k]) for k in COLUMNS) + f" | {_rate(c, 'false')} |")
    for doc, rule, sev, ev in result["unjudged"]:
        print(f"no verdict: {doc} {rule} {sev} {ev!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report_dir", type=Path, help="folder of <doc>.json reports with risks")
    ap.add_argument("--set", required=True, choices=("commercial", "contracts"),
                    help="which dev set's verdicts (contracts: the licences and the shared set)")
    ap.add_argument("--verdicts", type=Path, default=VERDICTS)
    args = ap.parse_args()
    result = score_dir(args.report_dir, load_verdicts(args.verdicts, args.set))
    print_table(result, f"risks of {args.report_dir} ({args.set})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
