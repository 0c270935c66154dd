#!/usr/bin/env python3
"""Check labels.json against the document texts beside it and print the label table.

Usage: check_labels.py [DIR]      (DIR defaults to this script's folder)

For every document in labels.json: the NAME.txt file must exist, every clause kind must have a label, and
every labelled span (and each of its "also" spans) must lie inside the text and the text at char_start must
begin with the label's "starts" string. Prints a docs x kinds table and the counts; exits 1 on any error.
"""
import json
import pathlib
import sys

KINDS = ["parties", "term", "payment", "termination", "liability_cap", "indemnity", "confidentiality",
         "governing_law", "assignment"]
SHORT = {"parties": "part", "term": "term", "payment": "pay", "termination": "trmn", "liability_cap": "liab",
         "indemnity": "indm", "confidentiality": "conf", "governing_law": "law", "assignment": "asgn"}


def check_span(text: str, span: dict, where: str, need_starts: bool) -> list:
    errors = []
    cs, ce = span.get("char_start"), span.get("char_end")
    if not (isinstance(cs, int) and isinstance(ce, int) and 0 <= cs < ce <= len(text)):
        return [f"{where}: bad span [{cs}, {ce}) for a text of {len(text)} chars"]
    starts = span.get("starts")
    if starts is None:
        if need_starts:
            errors.append(f"{where}: no 'starts' string")
    elif not text.startswith(starts, cs):
        errors.append(f"{where}: text at {cs} is {text[cs:cs + len(starts)]!r}, not {starts!r}")
    return errors


def check(folder: pathlib.Path):
    labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    errors, table = [], {}
    for doc, kinds in labels.items():
        path = folder / f"{doc}.txt"
        if not path.exists():
            errors.append(f"{doc}: no {path.name}")
            continue
        text = path.read_text(encoding="utf-8")
        if "\r" in text:
            errors.append(f"{doc}: text has carriage returns (line endings must be normalised to \\n)")
        extra = set(kinds) - set(KINDS)
        if extra:
            errors.append(f"{doc}: unknown kinds {sorted(extra)}")
        row = {}
        for kind in KINDS:
            lab = kinds.get(kind)
            where = f"{doc}/{kind}"
            if lab is None:
                errors.append(f"{where}: no label")
                row[kind] = "?"
            elif lab in ("absent", "not scored"):
                row[kind] = lab
            elif isinstance(lab, dict):
                errors += check_span(text, lab, where, need_starts=True)
                for i, also in enumerate(lab.get("also", [])):
                    errors += check_span(text, also, f"{where}/also[{i}]", need_starts=False)
                row[kind] = "present"
            else:
                errors.append(f"{where}: label must be a span, 'absent' or 'not scored', not {lab!r}")
                row[kind] = "?"
        table[doc] = row
    unlabelled = sorted(p.stem for p in folder.glob("*.txt") if p.stem not in labels)
    for doc in unlabelled:
        errors.append(f"{doc}.txt has no labels")
    return labels, table, errors


def main(argv):
    folder = pathlib.Path(argv[1]).resolve() if len(argv) > 1 else pathlib.Path(__file__).resolve().parent
    labels, table, errors = check(folder)
    mark = {"present": "P", "absent": "-", "not scored": "n/s", "?": "??"}
    width = max([len(d) for d in table] + [8])
    print(f"{'document':{width}s} " + " ".join(f"{SHORT[k]:>4s}" for k in KINDS))
    for doc, row in table.items():
        cells = []
        for k in KINDS:
            m = mark[row[k]]
            if row[k] == "present" and labels[doc][k].get("also"):
                m += "+"
            cells.append(f"{m:>4s}")
        print(f"{doc:{width}s} " + " ".join(cells))
    print("\nP = present (P+ = with 'also' spans), - = absent, n/s = not scored")
    print(f"\n{'kind':15s} {'present':>8s} {'absent':>7s} {'n/s':>5s}")
    totals = {"present": 0, "absent": 0, "not scored": 0}
    for k in KINDS:
        n = {s: sum(1 for row in table.values() if row[k] == s) for s in totals}
        for s in totals:
            totals[s] += n[s]
        print(f"{k:15s} {n['present']:8d} {n['absent']:7d} {n['not scored']:5d}")
    print(f"{'total':15s} {totals['present']:8d} {totals['absent']:7d} {totals['not scored']:5d}")
    print(f"\n{len(table)} documents, {totals['present']} present labels, {totals['absent']} absent labels, "
          f"{totals['not scored']} not scored")
    if errors:
        print(f"\n{len(errors)} error(s):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    print("all spans verified")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
