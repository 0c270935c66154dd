"""Review quality on real, labelled agreements and licences: the main job's review, scored.

Runs `agentctx review`'s pipeline with default settings over every dev document
(bench/devsets/contracts/ and the shared dev set), writes each report, scores them with
bench/devsets/contracts/score.py and prints per-kind precision / recall / false-positive
tables for the tuning half, the check half and all documents.

    python bench/bench_review.py                          # selected (12%) + dense + rules-only
    python bench/bench_review.py --modes rules            # no model, seconds
    python bench/bench_review.py --sweep                  # the threshold sweep on the tuning half

Peers, over the same prefilled KV per document:
* ``selected``: the review with 12% block selection (``--budget``) for its model calls;
* ``dense``: the same review attending every page;
* ``rules``: no retrieval and no model: the structure + lexicon decision alone.
The model's calls are its scores of close candidates and the secondary severity; the
candidates, the absence decision and the rules do not depend on the plan, so the peers
can only differ where the model's scores count (``MODEL_WEIGHT``: 0, since the tuning half
said so; the run where the model chose among close candidates is in BENCHMARKS.md §2).
Either way each report records the model's scores of the close candidates, and the bench
counts how often its own pick was right beside the rules' pick.

The split: thresholds and weights were set on TUNING (11 documents); CHECK (10) was only
scored. The sample contract's 9 kinds are checked against SAMPLE_SECTIONS
(tests/fixtures/sample_labels.py), labelled by reading it (where a kind recurs in a schedule,
each occurrence counts).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentctx.agents import CLAUSE_KINDS  # noqa: E402
from tests.fixtures.sample_labels import sample_check  # noqa: E402

DEVSET = ROOT / "bench" / "devsets" / "contracts"
TUNING = ("python_psf_license", "python_cnri_license", "python_cwi_license", "apache_2_0", "gpl_3_0", "epl_1_0",
          "cc_by_4_0", "nvidia_cuda_sdk_eula", "intel_devtools_eula", "pyarmor_eula", "mutual_nda")
# bench/devsets/commercial (other drafting families): the split stated in its README, fixed before any review ran.
COMMERCIAL = ROOT / "bench" / "devsets" / "commercial"
# consulting_agreement and stock_purchase_agreement: tuning documents not reproduced (its README says why).
COMMERCIAL_TUNING = ("github_cloud_evaluation", "consulting_agreement", "stock_purchase_agreement",
                     "bonterms_professional_services", "basecamp_terms_of_service")


def _scorer():
    spec = importlib.util.spec_from_file_location("score", DEVSET / "score.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SCORE = _scorer()
# The label folders scored (--devset): the licences plus the shared set, or bench/devsets/commercial.
LABEL_DIRS = SCORE.default_label_dirs(with_shared=True)


def documents() -> dict[str, Path]:
    return {p.stem: p for d in LABEL_DIRS for p in sorted(Path(d).glob("*.txt"))}


# ------------------------------------------------------------------ runs
def run_rules(docs: dict[str, Path], out: Path, threshold: float | None = None,
              min_body: float | None = None) -> None:
    from agentctx.agents.clause_candidates import rules_only
    from agentctx.retrieval.structure import parse_structure

    out.mkdir(parents=True, exist_ok=True)
    for name, path in docs.items():
        text = path.read_text(encoding="utf-8")
        st = parse_structure(text)
        chosen = rules_only(st, CLAUSE_KINDS, threshold, min_body)
        clauses = [{"kind": k, "present": c is not None, "section": c.section_name if c else None,
                    "citation": {"char_start": c.start, "char_end": c.end} if c else None,
                    "candidates": [c.to_dict()] if c else []} for k, c in chosen.items()]
        (out / f"{name}.json").write_text(json.dumps({"clauses": clauses, "risks": rules_risks(st, text, chosen)},
                                                     indent=1))


def rules_risks(st, text: str, chosen: dict) -> list[dict]:
    """The risks of a rules-only review: the red-flag rules over each found kind's sections (the
    review's own grouping, without the model's secondary severity), and a missing limitation of
    liability. The whole file is one document here, as for the rules peer's clause decisions."""
    from agentctx.agents.clause_lexicon import normalize
    from agentctx.agents.review_steps import rule_risks
    from agentctx.agents.risk_rules import RULE_KINDS, no_liability_cap

    def span(s, e):
        return {"char_start": s, "char_end": e, "quote": normalize(text[s:e])}

    risks = []
    for kind, c in chosen.items():
        if kind == "liability_cap" and c is None:
            h = no_liability_cap()
            risks.append({"rule": h.rule, "clause_kind": h.kind, "severity": h.severity, "citation": None,
                          "rationale": h.rationale, "facts": h.facts, "other_evidence": []})
        if c is None or kind not in RULE_KINDS:
            continue
        for group in rule_risks(st, text, kind, c.start):
            h = group[0]
            risks.append({"rule": h.rule, "clause_kind": h.kind, "severity": h.severity,
                          "citation": span(h.start, h.end) if h.start is not None else None,
                          "rationale": h.rationale, "facts": h.facts,
                          "other_evidence": [span(o.start, o.end) for o in group[1:] if o.start is not None]})
    return risks


def run_model(docs: dict[str, Path], out: Path, modes: list[str], budget: float) -> dict:
    """The review pipeline per document and mode over one runtime (one prefill per document)."""
    from agentctx.config import AgentctxConfig
    from agentctx.pipelines.document_review import run_review
    from agentctx.pipelines.report_html import render_html
    from agentctx.runtime import Runtime

    cfg = AgentctxConfig()
    cfg.retrieval = cfg.retrieval.model_copy(update={"budget_fraction": budget, "top_k_pages": None})
    timing = {}
    with Runtime.start(cfg) as rt:
        for name, path in docs.items():
            text = path.read_text(encoding="utf-8")
            for mode in modes:
                d = out / mode
                d.mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                report = run_review(rt, text, source=name, tenant="bench", dense=(mode == "dense"), progress=False)
                timing[(name, mode)] = round(time.perf_counter() - t0, 1)
                data = json.loads(report.model_dump_json())
                (d / f"{name}.json").write_text(json.dumps(data, indent=1))
                (d / f"{name}.html").write_text(render_html(report, text))
                print(json.dumps({"doc": name, "mode": mode, "s": timing[(name, mode)],
                                  "tokens": data["document"]["num_tokens"],
                                  "found": report.stats["clauses_found"], "errors": len(report.errors)}),
                      flush=True)
    return timing


# ------------------------------------------------------------------ scoring
def score(report_dir: Path, docs: set[str]) -> dict:
    labels = {d: v for d, v in SCORE.load_labels(LABEL_DIRS).items() if d in docs}
    return SCORE.score_dir(report_dir, labels)


def table_rows(report_dir: Path, split: dict[str, set[str]]) -> list[dict]:
    rows = []
    for half, docs in split.items():
        t = score(report_dir, docs)["total"]
        rows.append({"half": half, **{k: t[k] for k in ("correct", "wrong", "miss", "false_positive",
                                                         "correct_absent", "precision", "recall", "fp_rate")}})
    return rows


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_kind_table(report_dir: Path, docs: set[str], title: str) -> None:
    r = score(report_dir, docs)
    print(f"\n#### {title}\n")
    print("| kind | correct | wrong | miss | FP | absent ok | precision | recall | FP rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in list(r["per_kind"].items()) + [("**all kinds**", r["total"])]:
        print(f"| {name} | {m['correct']} | {m['wrong']} | {m['miss']} | {m['false_positive']} | "
              f"{m['correct_absent']} | {_f(m['precision'])} | {_f(m['recall'])} | {_f(m['fp_rate'])} |")


def score_operative(report_dir: Path, docs: set[str]) -> dict:
    """Sentence level: does the citation cover the operative sentence (bench/devsets/contracts/operative.json)?"""
    labels = {d: v for d, v in SCORE.load_labels(LABEL_DIRS).items() if d in docs}
    return SCORE.score_dir_operative(report_dir, labels, SCORE.load_operative_dirs(LABEL_DIRS))


def print_operative_table(report_dir: Path, split: dict[str, set[str]], mode: str) -> None:
    print(f"\n#### {mode}, sentence level (the operative sentence cited; operative.json)\n")
    print("| kind | " + " | ".join(f"{h} operative / partial / related / miss" for h in split) + " |")
    print("|---|" + "---:|" * len(split))
    res = {h: score_operative(report_dir, docs) for h, docs in split.items()}
    for name in list(res["all"]["per_kind"]) + ["**all kinds**"]:
        cells = []
        for h in split:
            m = res[h]["total"] if name == "**all kinds**" else res[h]["per_kind"][name]
            cells.append(f"{m['operative']} / {m['partial']} / {m['related']} / {m['miss']} "
                         f"({_f(m['operative_rate'])})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def model_choice_stats(report_dir: Path, docs: set[str]) -> dict:
    """Close calls (the model scored the candidates): how often its own pick (best option score)
    was right, against the rules' first candidate, and whether it agreed with the pick made."""
    labels = SCORE.load_labels(LABEL_DIRS)
    operative = SCORE.load_operative_dirs(LABEL_DIRS)
    out = {"asked": 0, "agreed": 0, "scored": 0, "model_pick_right": 0, "rules_pick_right": 0, "chosen_right": 0,
           "scored_operative": 0, "model_pick_operative": 0, "rules_pick_operative": 0}
    for name in sorted(docs):
        p = report_dir / f"{name}.json"
        if not p.exists():
            continue
        for c in json.loads(p.read_text())["clauses"]:
            opts = [x for x in c.get("candidates", []) if "model_score" in x]
            if not c.get("present") or len(opts) < 2:
                continue
            out["asked"] += 1
            cit = c["citation"]
            own = max(opts, key=lambda x: x["model_score"])
            out["agreed"] += (own["char_start"], own["char_end"]) == (cit["char_start"], cit["char_end"])
            lab = labels[name].get(c["kind"])
            if not isinstance(lab, dict):
                continue
            spans = [lab] + list(lab.get("also", []))

            def right(x, spans=spans):
                return any(SCORE.fraction_inside(x["char_start"], x["char_end"], s) >= 0.5 for s in spans)

            out["scored"] += 1
            out["model_pick_right"] += right(own)
            out["rules_pick_right"] += right(opts[0])
            out["chosen_right"] += right(cit)
            op = operative.get(name, {}).get(c["kind"])
            if op is not None:  # sentence level: does the pick cover the operative sentence (half of it)?
                ops = [op] + list(op.get("also", []))

                def is_operative(x, ops=ops, right=right):
                    return right(x) and max(SCORE.covered(x["char_start"], x["char_end"], o) for o in ops) >= 0.5

                out["scored_operative"] += 1
                out["model_pick_operative"] += is_operative(own)
                out["rules_pick_operative"] += is_operative(opts[0])
    return out


def sweep(docs: dict[str, Path], out: Path, split: dict[str, set[str]]) -> tuple[float, float]:
    """Rules-only scores over a grid of (score threshold, operative-language minimum) on the tuning
    half. Among the settings with the best F1 and an FP rate <= 10%, the highest thresholds win:
    the most conservative setting that loses nothing on the tuning half."""
    print("\n| threshold | min body | tuning P | tuning R | tuning FP rate | check P | check R | check FP rate |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for th in (0.5, 1.0, 1.5, 2.0, 2.5):
        for mb in (0.3, 0.7, 1.0, 1.3):
            d = out / f"sweep-{th}-{mb}"
            run_rules(docs, d, th, mb)
            tu = score(d, split["tuning"])["total"]
            ch = score(d, split["check"])["total"]
            print(f"| {th} | {mb} | {_f(tu['precision'])} | {_f(tu['recall'])} | {_f(tu['fp_rate'])} | "
                  f"{_f(ch['precision'])} | {_f(ch['recall'])} | {_f(ch['fp_rate'])} |")
            p, r, fp = tu["precision"] or 0, tu["recall"] or 0, tu["fp_rate"] or 0
            f1 = 2 * p * r / (p + r) if p + r else 0
            if fp <= 0.10:
                results.append((round(f1, 6), th, mb))
    best = max(results)
    print(f"\nchosen on the tuning half: threshold {best[1]}, min body {best[2]} (F1 {best[0]:.3f}; "
          f"the highest thresholds among the best)")
    return best[1], best[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="selected,dense,rules", help="comma list of selected, dense, rules")
    ap.add_argument("--budget", type=float, default=0.12, help="selected peer: fraction of the context attended")
    ap.add_argument("--out", default="out/bench_review",
                    help="reports go to OUT/<mode>/<doc>.json (the rules peer's carry its risks too)")
    ap.add_argument("--summary", default="bench/results/review_devset.json",
                    help="where the tables and the model's choice counts are written as JSON")
    ap.add_argument("--docs", help="comma list of document names (default: all)")
    ap.add_argument("--sweep", action="store_true", help="also sweep the rules-only threshold on the tuning half")
    ap.add_argument("--sample", action="store_true", help="also review the bundled sample (selected mode)")
    ap.add_argument("--devset", choices=("contracts", "commercial"), default="contracts",
                    help="contracts: the licences + the shared set; commercial: bench/devsets/commercial")
    args = ap.parse_args()
    global LABEL_DIRS
    tuning = TUNING
    if args.devset == "commercial":
        LABEL_DIRS, tuning = [COMMERCIAL], COMMERCIAL_TUNING
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    docs = documents()
    if args.docs:
        docs = {k: v for k, v in docs.items() if k in args.docs.split(",")}
    split = {"tuning": {d for d in docs if d in tuning}, "check": {d for d in docs if d not in tuning},
             "all": set(docs)}
    modes = [m for m in args.modes.split(",") if m]
    model_modes = [m for m in modes if m in ("selected", "dense")]
    t0 = time.perf_counter()
    if "rules" in modes:
        run_rules(docs, out / "rules")
    timing = run_model(docs, out, model_modes, args.budget) if model_modes else {}
    print(f"\n## Review of {len(docs)} dev documents ({time.perf_counter() - t0:.0f} s)\n")
    print("| peer | half | correct | wrong | miss | FP | absent ok | precision | recall | FP rate |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        for row in table_rows(out / mode, split):
            print(f"| {mode} | {row['half']} | {row['correct']} | {row['wrong']} | {row['miss']} | "
                  f"{row['false_positive']} | {row['correct_absent']} | {_f(row['precision'])} | "
                  f"{_f(row['recall'])} | {_f(row['fp_rate'])} |")
    main_mode = model_modes[0] if model_modes else "rules"
    for half in ("tuning", "check", "all"):
        print_kind_table(out / main_mode, split[half], f"{main_mode}, {half} half" if half != "all" else
                         f"{main_mode}, all documents")
    print_operative_table(out / main_mode, split, main_mode)
    summary = {"tables": {m: table_rows(out / m, split) for m in modes},
               "operative": {m: {h: score_operative(out / m, split[h])["total"] for h in split} for m in modes},
               "per_kind": {m: {h: score(out / m, split[h])["per_kind"] for h in split} for m in modes},
               "model_choices": {m: {h: model_choice_stats(out / m, split[h]) for h in split} for m in model_modes},
               "seconds": {f"{d}/{m}": v for (d, m), v in timing.items()}}
    for mode in model_modes:
        print(f"\nmodel's choices ({mode}):", summary["model_choices"][mode])
    if timing:
        per = {m: round(sum(v for (d, mm), v in timing.items() if mm == m), 1) for m in model_modes}
        print("\nreview seconds (load + pipeline, summed over documents):", per)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.summary:
        Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    if args.sweep:
        sweep(docs, out, split)
    if args.sample:
        sample(out)
    return 0


def sample(out: Path) -> None:
    from agentctx.entrypoints.cli import SAMPLE_CONTRACT
    from agentctx.pipelines.document_review import run_review
    from agentctx.runtime import Runtime

    text = SAMPLE_CONTRACT.read_text()
    t0 = time.perf_counter()
    with Runtime.start() as rt:
        t1 = time.perf_counter()
        report = run_review(rt, text, source="sample_contract.txt", out_dir=out / "sample", progress=False)
    data = json.loads(report.model_dump_json())
    ok = sample_check(data)
    print(f"\nsample: {sum(ok.values())}/9 kinds in their labelled articles {ok}; review {report.stats['total_s']} s "
          f"(prefill {report.document.prefill_s} s), runtime start {t1 - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
