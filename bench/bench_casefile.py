"""Case files: several real agreements inside real filler text, reviewed per document.

A case file is built from the labelled dev documents (bench/devsets/contracts and the shared
dev set): ``--agreements`` of them, each after a stretch of real technical text (GNU manuals,
bench/devsets/selection/sources; stretches naming a licence or agreement are skipped), in a
seeded order. Each case file is reviewed three ways, rules only (structure + lexicon, no model:
the review's clause decisions without retrieval's small bonus), seconds in all:

* ``one``: the whole file as one agreement (the review before case files): one finding per kind;
* ``split``: the documents found in the text (retrieval.documents), each reviewed apart;
* ``headers``: the same agreements joined as files (``agentctx review a.txt b.txt``): exact
  boundaries from the file headers, no filler.

``--devset commercial`` builds the same case files from bench/devsets/commercial (agreements of
other drafting families: terms of service, NDAs, consulting, employment, a DPA, a note, public-sector
terms, EDGAR exhibits; every document with labels), and ``--half tuning|check`` draws them from one
half of that set's split (bench/devsets/commercial/README.md) only, so a splitting rule can be read
on one half and checked on the other (the tuning half holds three documents: its case files hold
all three, in a seeded order). ``--half check-a|check-b`` splits the check half again for splitting
rules, fixed before any of its misses was read: its 25 documents (``CHECK_HALF``, listed so that
documents added later stay out) sorted by name, the 1st, 3rd, 5th, ... are ``check-a`` ("split-tuning",
read for splitting errors), the 2nd, 4th, ... ``check-b`` ("split-check", scored, not read).

Splitting is scored per agreement (``whole``): an agreement is found whole when one document of
the split holds all of it and no other agreement; otherwise it is ``cut`` (a boundary falls inside
it) or ``merged`` (its document also holds another agreement). ``extra`` counts documents found
that hold no agreement's start beyond the filler at the file's head ("other text" not counted).
Clauses are scored per labelled agreement with the dev set's rule (bench/devsets/contracts/score.py: a
finding is correct when half its span lies in the kind's labelled section): correct, wrong,
missed, false positives on absent kinds, and the share of findings whose citation lies inside
the agreement it is reported for; and at sentence level (bench/devsets/contracts/operative.json):
the share of labelled present kinds whose citation is the operative sentence.

    python bench/bench_casefile.py                      # 8 case files of 4 agreements
    python bench/bench_casefile.py --files 20 --json out.json
    python bench/bench_casefile.py --devset commercial --files 20 --half tuning
    python bench/bench_casefile.py --devset commercial --files 20 --half check-a --show
    python bench/bench_casefile.py --devset casefile_bounds --files 20   # boundaries only

``--devset casefile_bounds`` (bench/devsets/casefile_bounds, README there) holds agreements without clause
labels, one a file, for boundaries only: the same seeded case files, scored whole / cut / merged / extra.
``--devset casefile_bounds2`` is a second such set (bench/devsets/casefile_bounds2), built blind after the first
was spent, and ``--devset casefile_bounds3`` a third (bench/devsets/casefile_bounds3), built blind after the second.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentctx.agents import CLAUSE_KINDS  # noqa: E402
from agentctx.agents.clause_candidates import rules_only  # noqa: E402
from agentctx.retrieval.documents import document_structure, join_documents, split_documents  # noqa: E402
from agentctx.retrieval.structure import parse_structure  # noqa: E402
from bench.bench_review import COMMERCIAL, COMMERCIAL_TUNING, SCORE, documents  # noqa: E402

TOTALS = ("correct", "wrong", "miss", "false_positive", "inside", "cited", "op_operative", "op_partial", "op_related",
          "op_miss", "whole", "cut", "merged", "extra")
FILLER = ROOT / "bench" / "devsets" / "selection" / "sources" / "gnu-manuals.txt.gz"
BOUNDS = ROOT / "bench" / "devsets" / "casefile_bounds"
BOUNDS2 = ROOT / "bench" / "devsets" / "casefile_bounds2"  # the second blind set (README there)
BOUNDS3 = ROOT / "bench" / "devsets" / "casefile_bounds3"  # the third blind set (README there)
_BOUNDS = {"casefile_bounds": BOUNDS, "casefile_bounds2": BOUNDS2, "casefile_bounds3": BOUNDS3}
_LEGAL = re.compile(r"licen[cs]e|agreement", re.I)
# The commercial set's check half as it stood when splitting rules were first read on part of it
# (2026-12-07); sorted by name, every other one is split-tuning (check-a), the rest split-check (check-b).
CHECK_HALF = ("accord_copyright_license", "aspirity_outsourcing_agreement", "automattic_ireland_employment",
              "automattic_us_contractor", "bc_marketplace_terms", "bc_registry_account_agreement",
              "blackboxstocks_distributor_agreement", "bonterms_cloud_terms", "bonterms_mutual_nda",
              "canonical_purchase_conditions", "canonical_service_terms", "commonhaus_fiscal_sponsorship",
              "commonpaper_dpa", "corio_license_hosting_agreement", "flyio_terms_of_service",
              "gofreerange_general_terms", "harmony_cla_individual", "mozilla_prototype_agreement",
              "ols_fiscal_community_agreement", "opengov_work_for_hire", "owasp_presenter_agreement",
              "plain_website_terms", "psf_sponsorship_agreement", "seriesseed_convertible_note",
              "woocommerce_use_terms")
SPLIT_HALVES = {"check-a": tuple(sorted(CHECK_HALF)[0::2]), "check-b": tuple(sorted(CHECK_HALF)[1::2])}


def build_case_file(rng: random.Random, docs: dict[str, str], filler: str, n: int,
                    filler_chars: tuple[int, int]) -> tuple[str, list[tuple[str, int, int]]]:
    """(text, [(doc, start, end)]): ``n`` dev documents, each after a stretch of real filler."""
    text, spans = "", []
    for name in rng.sample(sorted(docs), min(n, len(docs))):
        while True:
            a = rng.randrange(0, len(filler) - filler_chars[1])
            chunk = filler[a:a + rng.randrange(*filler_chars)]
            if not _LEGAL.search(chunk):
                break
        text += chunk.strip() + "\n\n"
        body = docs[name].strip()
        spans.append((name, len(text), len(text) + len(body)))
        text += body + "\n\n"
    return text, spans


def _findings(st, kinds) -> list[tuple[str, int, int]]:
    return [(k, c.start, c.end) for k, c in rules_only(st, kinds).items() if c is not None]


def review(text: str, mode: str) -> list[tuple[int | None, str, int, int]]:
    """(document index or None, kind, start, end) of each finding."""
    if mode == "one":
        return [(None, k, s, e) for k, s, e in _findings(parse_structure(text), CLAUSE_KINDS)]
    parts = split_documents(text)
    return [(p.index, k, s, e) for p in parts for k, s, e in _findings(document_structure(text, p), CLAUSE_KINDS)]


def split_outcomes(parts, spans) -> dict[str, int]:
    """Per agreement, whether the split found it ``whole`` (one document holds all of it and no other
    agreement), ``cut`` (a boundary falls inside it) or ``merged`` (with another agreement); and the
    ``extra`` documents, those holding no agreement's start (a boundary inside filler text)."""
    out = dict.fromkeys(("whole", "cut", "merged", "extra"), 0)
    for _, s, e in spans:
        own = [p for p in parts if p.start < e and s < p.end]
        if len(own) > 1:
            out["cut"] += 1
        elif any(own[0].holds(s2) for _, s2, _ in spans if s2 != s):
            out["merged"] += 1
        else:
            out["whole"] += 1
    out["extra"] = sum(1 for p in parts if p.reviewed and not any(p.start < e and s < p.end for _, s, e in spans))
    return out


def score_case(text: str, spans, labels: dict, mode: str, operative: dict | None = None) -> dict:
    found = review(text, mode)
    parts = split_documents(text) if mode != "one" else []
    totals = dict.fromkeys(TOTALS, 0)
    if parts:
        totals.update(split_outcomes(parts, spans))
    for name, s, e in spans:
        if mode == "one":
            mine = [(k, a, b) for _, k, a, b in found if s <= a < e]
        else:
            own = next(p.index for p in parts if p.holds(s + 100))
            mine = [(k, a, b) for d, k, a, b in found if d == own]
        totals["cited"] += len(mine)
        totals["inside"] += sum(s <= a and b <= e for _, a, b in mine)
        report = {"clauses": [{"kind": k, "present": any(k == kk for kk, _, _ in mine),
                               "citation": next(({"char_start": a - s, "char_end": b - s}
                                                 for kk, a, b in mine if kk == k), None)} for k in CLAUSE_KINDS]}
        rows = SCORE.score_doc(labels[name], report)
        for outcome in rows.values():
            if outcome in totals:
                totals[outcome] += 1
        if operative and name in operative:
            for outcome in SCORE.score_doc_operative(labels[name], operative[name], report).values():
                totals[f"op_{outcome}"] += 1
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=8, help="case files to build")
    ap.add_argument("--agreements", type=int, default=4, help="agreements per case file")
    ap.add_argument("--filler", type=int, nargs=2, default=(2000, 30000), metavar=("MIN", "MAX"),
                    help="characters of filler before each agreement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devset", choices=("contracts", "commercial", *_BOUNDS),
                    default="contracts",
                    help="contracts: the licences + the shared set; commercial: bench/devsets/commercial; "
                         "casefile_bounds, casefile_bounds2, casefile_bounds3: unlabelled agreements, boundaries only")
    ap.add_argument("--half", choices=("all", "tuning", "check", "check-a", "check-b"), default="all",
                    help="draw the agreements from one half of the commercial set's split only; check-a / check-b: "
                         "every other document of the check half by name (split-tuning / split-check)")
    ap.add_argument("--show", action="store_true", help="print each agreement not found whole, and extra documents")
    ap.add_argument("--json", help="write the totals here")
    ap.add_argument("--write", metavar="FILE",
                    help="write the first case file's text here and stop (e.g. --agreements 5 --filler 70000 90000: "
                         "~120K tokens, the main job's long run in RELIABILITY.md)")
    args = ap.parse_args(argv)
    if args.devset in _BOUNDS:
        if args.half != "all":
            ap.error("--half reads the commercial set's split: use it with --devset commercial")
        return _bounds_only(args)
    if args.devset == "commercial":
        labels = SCORE.load_labels([COMMERCIAL])
        operative = SCORE.load_operative_dirs([COMMERCIAL])
        paths = {p.stem: p for p in sorted(COMMERCIAL.glob("*.txt"))}
    else:
        if args.half != "all":
            ap.error("--half reads the commercial set's split: use it with --devset commercial")
        labels = SCORE.load_labels(SCORE.default_label_dirs(True))
        operative = SCORE.load_operative()
        paths = documents()
    docs = {n: p.read_text(encoding="utf-8") for n, p in paths.items() if n in labels}
    if args.half in SPLIT_HALVES:
        docs = {n: t for n, t in docs.items() if n in SPLIT_HALVES[args.half]}
    elif args.half != "all":
        docs = {n: t for n, t in docs.items() if (n in COMMERCIAL_TUNING) == (args.half == "tuning")}
    filler = gzip.open(FILLER, "rt", encoding="utf-8").read()
    rng = random.Random(args.seed)
    out = {m: dict.fromkeys(TOTALS, 0) for m in ("one", "split", "headers")}
    for _ in range(args.files):
        text, spans = build_case_file(rng, docs, filler, args.agreements, tuple(args.filler))
        if args.write:
            Path(args.write).write_text(text, encoding="utf-8")
            print(f"{args.write}: {len(text):,} characters; agreements " + ", ".join(n for n, _, _ in spans))
            return 0
        for mode in ("one", "split"):
            for k, v in score_case(text, spans, labels, mode, operative).items():
                out[mode][k] += v
        if args.show:
            _show(text, spans)
        joined = join_documents([(n, docs[n]) for n, _, _ in spans])
        jspans = []
        for n, _, _ in spans:
            at = joined.index(docs[n].strip())
            jspans.append((n, at, at + len(docs[n].strip())))
        for k, v in score_case(joined, jspans, labels, "headers", operative).items():
            out["headers"][k] += v
    n = min(args.agreements, len(docs))
    print(f"{args.files} case files x {n} agreements (seed {args.seed}; {args.devset}, {args.half}: "
          f"{len(docs)} documents), rules only")
    s = out["split"]
    print(f"split: {s['whole']} of {s['whole'] + s['cut'] + s['merged']} agreements found whole "
          f"({s['cut']} cut, {s['merged']} merged), {s['extra']} extra documents in filler")
    print(f"{'mode':8s} {'correct':>8s} {'wrong':>6s} {'miss':>5s} {'fp':>4s} {'recall':>7s} {'inside':>7s} "
          f"{'operative':>10s}")
    for mode, t in out.items():
        scored = t["correct"] + t["wrong"] + t["miss"]
        t["recall"] = round(t["correct"] / scored, 3) if scored else None
        t["inside_share"] = round(t["inside"] / t["cited"], 3) if t["cited"] else None
        ops = sum(t[k] for k in TOTALS if k.startswith("op_"))
        t["operative_rate"] = round(t["op_operative"] / ops, 3) if ops else None
        print(f"{mode:8s} {t['correct']:8d} {t['wrong']:6d} {t['miss']:5d} {t['false_positive']:4d} "
              f"{t['recall']!s:>7s} {t['inside_share']!s:>7s} {t['operative_rate']!s:>10s}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "totals": out}, indent=1))
    return 0


def _bounds_only(args) -> int:
    """Boundaries only: the seeded case files of an unlabelled set, whole / cut / merged / extra."""
    folder = _BOUNDS[args.devset]
    docs = {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}
    filler = gzip.open(FILLER, "rt", encoding="utf-8").read()
    rng = random.Random(args.seed)
    out = dict.fromkeys(("whole", "cut", "merged", "extra"), 0)
    for _ in range(args.files):
        text, spans = build_case_file(rng, docs, filler, args.agreements, tuple(args.filler))
        for k, v in split_outcomes(split_documents(text), spans).items():
            out[k] += v
        if args.show:
            _show(text, spans)
    n = min(args.agreements, len(docs))
    print(f"{args.files} case files x {n} agreements (seed {args.seed}; {args.devset}: {len(docs)} documents), "
          "boundaries only")
    print(f"split: {out['whole']} of {out['whole'] + out['cut'] + out['merged']} agreements found whole "
          f"({out['cut']} cut, {out['merged']} merged), {out['extra']} extra documents in filler")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "totals": out}, indent=1))
    return 0


def _show(text: str, spans) -> None:
    parts = split_documents(text)
    for name, s, e in spans:
        own = [p for p in parts if p.start < e and s < p.end]
        if len(own) == 1 and not any(own[0].holds(s2) for _, s2, _ in spans if s2 != s):
            continue
        print(f"  {name} [{s}, {e}): " + "; ".join(f"{p.how} {p.name!r} [{p.start}, {p.end})" for p in own))
    for p in parts:
        if p.reviewed and not any(p.start < e and s < p.end for _, s, e in spans):
            print(f"  extra {p.name!r} [{p.start}, {p.end}): {text[p.start:p.start + 80]!r}")


if __name__ == "__main__":
    raise SystemExit(main())
