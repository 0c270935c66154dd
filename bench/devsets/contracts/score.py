#!/usr/bin/env python3
"""Score document-review reports against the labelled contracts.

Usage: score.py REPORT_DIR [--json] [--verbose] [--labels-dir DIR ...] [--no-shared] [--operative]

REPORT_DIR holds one review report per document, named <doc>.json, each of the form
  {"clauses": [{"kind": ..., "present": bool, "citation": {"char_start": int, "char_end": int} | null}, ...]}
with character offsets into <doc>.txt.

Documents scored: every document of this folder's labels.json and of the shared dev set
(shared/devset/contracts/ beside the repository, i.e. /work/shared/devset/contracts here), unless
--labels-dir names other folders (repeatable) or --no-shared drops the shared set. A document with no
report file is skipped and listed.

Rule, per document and clause kind (the same as shared/devset/contracts/score_review.py):
  a kind counts as reported when the report has a clause of that kind with present true and a citation;
  label "not scored"  -> ignored;
  label "absent"      -> false_positive if reported, else correct_absent;
  label is a span     -> miss if not reported; correct if at least half of the cited span lies inside the
                         labelled span or inside one of its "also" spans; wrong otherwise.
Per kind and in total: precision = correct / (correct + wrong + false_positive),
recall = correct / (correct + wrong + miss), fp_rate = false_positive / (false_positive + correct_absent).

--operative adds the sentence-level score against operative.json (the operative sentence of each present kind,
with optional "also" sentences that serve equally; read from every label folder that has one, e.g.
--labels-dir bench/devsets/commercial), per document and present kind:
  operative  the cited span covers at least half of the operative span (or of one of its "also" spans)
             and at least half of the citation lies inside the kind's section span (or an "also" section);
  partial    the citation overlaps an operative span but is not "operative";
  related    a citation that does not touch the operative sentence (a related provision or a wrong one);
  miss       no finding.
Per kind and in total: operative_rate = operative / present kinds scored.
"""
import argparse
import json
import pathlib
import sys

KINDS = ["parties", "term", "payment", "termination", "liability_cap", "indemnity", "confidentiality",
         "governing_law", "assignment"]
OUTCOMES = ["correct", "wrong", "miss", "false_positive", "correct_absent"]
OP_OUTCOMES = ["operative", "partial", "related", "miss"]
HERE = pathlib.Path(__file__).resolve().parent
OPERATIVE = HERE / "operative.json"


def default_label_dirs(with_shared: bool) -> list:
    dirs = [HERE]
    if with_shared:
        repo_root = HERE.parents[2]          # bench/devsets/contracts -> repository root
        for cand in (repo_root / "shared" / "devset" / "contracts",
                     repo_root.parent / "shared" / "devset" / "contracts",
                     pathlib.Path("/work/shared/devset/contracts")):
            if (cand / "labels.json").exists():
                dirs.append(cand.resolve())
                break
        else:
            print("warning: shared dev set (shared/devset/contracts) not found; scoring this folder only",
                  file=sys.stderr)
    return dirs


def load_labels(dirs) -> dict:
    labels = {}
    for d in dirs:
        for doc, kinds in json.loads((pathlib.Path(d) / "labels.json").read_text(encoding="utf-8")).items():
            if doc in labels:
                raise SystemExit(f"document {doc!r} is labelled in two label folders")
            labels[doc] = kinds
    return labels


def fraction_inside(cs: int, ce: int, span: dict) -> float:
    overlap = max(0, min(span["char_end"], ce) - max(span["char_start"], cs))
    return overlap / max(1, ce - cs)


def score_doc(doc_labels: dict, report: dict) -> dict:
    by_kind = {}
    for clause in report.get("clauses", []):
        by_kind[clause.get("kind")] = clause          # the last clause of a kind wins, as in score_review.py
    rows = {}
    for kind in KINDS:
        lab = doc_labels.get(kind, "not scored")
        clause = by_kind.get(kind)
        cit = clause.get("citation") if clause else None
        reported = bool(clause and clause.get("present") and cit)
        if lab == "not scored":
            rows[kind] = "not scored"
        elif lab == "absent":
            rows[kind] = "false_positive" if reported else "correct_absent"
        elif not reported:
            rows[kind] = "miss"
        else:
            cs, ce = int(cit["char_start"]), int(cit["char_end"])
            spans = [lab] + list(lab.get("also", []))
            rows[kind] = "correct" if any(fraction_inside(cs, ce, s) >= 0.5 for s in spans) else "wrong"
    return rows


def covered(cs: int, ce: int, span: dict) -> float:
    """The fraction of ``span`` that the citation [cs, ce) covers."""
    overlap = max(0, min(span["char_end"], ce) - max(span["char_start"], cs))
    return overlap / max(1, span["char_end"] - span["char_start"])


def score_doc_operative(doc_labels: dict, doc_operative: dict, report: dict) -> dict:
    """Sentence-level outcome per present kind that has an operative label (see the module doc)."""
    by_kind = {c.get("kind"): c for c in report.get("clauses", [])}
    rows = {}
    for kind, op in doc_operative.items():
        lab = doc_labels.get(kind)
        if not isinstance(lab, dict):
            continue
        clause = by_kind.get(kind)
        cit = clause.get("citation") if clause else None
        if not (clause and clause.get("present") and cit):
            rows[kind] = "miss"
            continue
        cs, ce = int(cit["char_start"]), int(cit["char_end"])
        ops = [op] + list(op.get("also", []))
        in_section = any(fraction_inside(cs, ce, s) >= 0.5 for s in [lab] + list(lab.get("also", [])))
        cover = max(covered(cs, ce, o) for o in ops)
        if cover >= 0.5 and in_section:
            rows[kind] = "operative"
        elif cover > 0:
            rows[kind] = "partial"
        else:
            rows[kind] = "related"
    return rows


def score_dir_operative(report_dir: pathlib.Path, labels: dict, operative: dict) -> dict:
    docs = {}
    for doc, doc_labels in labels.items():
        path = report_dir / f"{doc}.json"
        if path.exists() and doc in operative:
            docs[doc] = score_doc_operative(doc_labels, operative[doc],
                                            json.loads(path.read_text(encoding="utf-8")))
    per_kind, total = {}, dict.fromkeys(OP_OUTCOMES, 0)
    for kind in KINDS:
        counts = dict.fromkeys(OP_OUTCOMES, 0)
        for rows in docs.values():
            if kind in rows:
                counts[rows[kind]] += 1
        for o in OP_OUTCOMES:
            total[o] += counts[o]
        per_kind[kind] = {**counts, "operative_rate": ratio(counts["operative"], sum(counts.values()))}
    total["operative_rate"] = ratio(total["operative"], sum(total[o] for o in OP_OUTCOMES))
    return {"documents_scored": len(docs), "per_kind": per_kind, "total": total, "documents": docs}


def load_operative(path: pathlib.Path = OPERATIVE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def load_operative_dirs(dirs) -> dict:
    """The operative labels of every label folder that has an operative.json (this folder's also covers the
    shared documents, which have none of their own)."""
    operative = {}
    for d in dirs:
        path = pathlib.Path(d) / "operative.json"
        if path.exists():
            for doc, kinds in load_operative(path).items():
                if doc in operative:
                    raise SystemExit(f"document {doc!r} has operative labels in two label folders")
                operative[doc] = kinds
    return operative


def print_operative_table(result: dict, verbose: bool) -> None:
    if verbose:
        for doc, rows in result["documents"].items():
            print(doc)
            for kind, outcome in rows.items():
                print(f"  {kind:15s} {outcome}")
        print()
    head = f"{'kind':15s} {'operative':>9s} {'partial':>7s} {'related':>7s} {'miss':>4s}  {'rate':>5s}"
    print(head)
    print("-" * len(head))
    for name, m in list(result["per_kind"].items()) + [("TOTAL", result["total"])]:
        if name == "TOTAL":
            print("-" * len(head))
        print(f"{name:15s} {m['operative']:9d} {m['partial']:7d} {m['related']:7d} {m['miss']:4d}  "
              f"{fmt(m['operative_rate'])}")


def ratio(num: int, den: int):
    return num / den if den else None


def metrics(counts: dict) -> dict:
    c = counts
    return {
        **c,
        "precision": ratio(c["correct"], c["correct"] + c["wrong"] + c["false_positive"]),
        "recall": ratio(c["correct"], c["correct"] + c["wrong"] + c["miss"]),
        "fp_rate": ratio(c["false_positive"], c["false_positive"] + c["correct_absent"]),
    }


def score_dir(report_dir: pathlib.Path, labels: dict) -> dict:
    docs, skipped = {}, []
    for doc, doc_labels in labels.items():
        path = report_dir / f"{doc}.json"
        if not path.exists():
            skipped.append(doc)
            continue
        docs[doc] = score_doc(doc_labels, json.loads(path.read_text(encoding="utf-8")))
    per_kind = {}
    total = dict.fromkeys(OUTCOMES, 0)
    for kind in KINDS:
        counts = dict.fromkeys(OUTCOMES, 0)
        for rows in docs.values():
            if rows[kind] in counts:
                counts[rows[kind]] += 1
        for o in OUTCOMES:
            total[o] += counts[o]
        per_kind[kind] = metrics(counts)
    return {"documents_scored": len(docs), "documents_skipped": skipped, "per_kind": per_kind,
            "total": metrics(total), "documents": docs}


def fmt(x) -> str:
    return "    -" if x is None else f"{x:5.2f}"


def print_table(result: dict, verbose: bool) -> None:
    if verbose:
        for doc, rows in result["documents"].items():
            print(doc)
            for kind, outcome in rows.items():
                print(f"  {kind:15s} {outcome}")
        print()
    head = f"{'kind':15s} {'correct':>7s} {'wrong':>5s} {'miss':>4s} {'fp':>3s} {'ok_abs':>6s}  " \
           f"{'prec':>5s} {'recall':>6s} {'fp_rate':>7s}"
    print(head)
    print("-" * len(head))
    for name, m in list(result["per_kind"].items()) + [("TOTAL", result["total"])]:
        if name == "TOTAL":
            print("-" * len(head))
        print(f"{name:15s} {m['correct']:7d} {m['wrong']:5d} {m['miss']:4d} {m['false_positive']:3d} "
              f"{m['correct_absent']:6d}  {fmt(m['precision'])} {fmt(m['recall']):>6s} {fmt(m['fp_rate']):>7s}")
    print(f"\n{result['documents_scored']} documents scored")
    if result["documents_skipped"]:
        print(f"no report for {len(result['documents_skipped'])}: {', '.join(result['documents_skipped'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report_dir", type=pathlib.Path, help="folder of <doc>.json review reports")
    ap.add_argument("--json", action="store_true", help="print the scores as JSON")
    ap.add_argument("--verbose", action="store_true", help="also print each document's outcome per kind")
    ap.add_argument("--labels-dir", action="append", type=pathlib.Path,
                    help="folder with labels.json (repeatable); default: this folder and the shared dev set")
    ap.add_argument("--no-shared", action="store_true", help="do not score the shared dev set")
    ap.add_argument("--operative", action="store_true",
                    help="also score the cited sentence against operative.json (sentence level)")
    args = ap.parse_args(argv)
    if not args.report_dir.is_dir():
        ap.error(f"{args.report_dir} is not a folder")
    dirs = args.labels_dir or default_label_dirs(with_shared=not args.no_shared)
    result = score_dir(args.report_dir, load_labels(dirs))
    result["label_dirs"] = [str(d) for d in dirs]
    if args.operative:
        result["operative"] = score_dir_operative(args.report_dir, load_labels(dirs), load_operative_dirs(dirs))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result, args.verbose)
        if args.operative:
            print("\nsentence level (operative.json):")
            print_operative_table(result["operative"], args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
