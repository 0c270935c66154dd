#!/usr/bin/env python3
"""Check labels.json against the document texts beside it and print the label table.

Usage: check_labels.py [DIR]      (DIR defaults to this script's folder)

For every document in labels.json: the NAME.txt file must exist, every clause kind must have a label, and
every labelled span (and each of its "also" spans) must lie inside the text and the text at char_start must
begin with the label's "starts" string. Prints a docs x kinds table and the counts; exits 1 on any error.

When DIR holds operative.json (the operative sentence of each present kind, see README), it is checked too,
against the labels of DIR and of the shared dev set: every present kind has an operative label, every
operative span (and each "also") begins with its "starts" and lies inside the kind's section span or one of
its "also" spans.
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


def check_operative(path: pathlib.Path, label_dirs) -> tuple[int, list]:
    """(number of operative spans, errors) of operative.json against the section labels of ``label_dirs``."""
    operative = json.loads(path.read_text(encoding="utf-8"))
    labels, texts = {}, {}
    for d in label_dirs:
        for doc, kinds in json.loads((d / "labels.json").read_text(encoding="utf-8")).items():
            labels[doc], texts[doc] = kinds, (d / f"{doc}.txt").read_text(encoding="utf-8")
    errors, n = [], 0
    for doc, kinds in labels.items():
        for kind, lab in kinds.items():
            if isinstance(lab, dict) and kind not in operative.get(doc, {}):
                errors.append(f"operative: {doc}/{kind} is present but has no operative label")
    for doc, kinds in operative.items():
        if doc not in labels:
            errors.append(f"operative: {doc} has no section labels")
            continue
        for kind, op in kinds.items():
            lab = labels[doc].get(kind)
            if not isinstance(lab, dict):
                errors.append(f"operative: {doc}/{kind} is labelled {lab!r}, not present")
                continue
            sections = [lab] + list(lab.get("also", []))
            for i, span in enumerate([op] + list(op.get("also", []))):
                where = f"operative: {doc}/{kind}" + (f"/also[{i - 1}]" if i else "")
                errs = check_span(texts[doc], span, where, need_starts=True)
                errors += errs
                n += 1
                if not errs and not any(s["char_start"] <= span["char_start"] and span["char_end"] <= s["char_end"]
                                        for s in sections):
                    errors.append(f"{where}: [{span['char_start']}, {span['char_end']}) lies outside the "
                                  f"kind's section spans")
    return n, errors


def _label_dirs(folder: pathlib.Path) -> list:
    """DIR alone when its operative.json covers only its own documents (bench/devsets/commercial); DIR and the
    shared dev set when it labels the shared documents too (this folder)."""
    operative = json.loads((folder / "operative.json").read_text(encoding="utf-8"))
    own = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    if set(operative) <= set(own):
        return [folder]
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import score  # the same search for the shared dev set as the scorer's

    return [folder] + [d for d in score.default_label_dirs(with_shared=True)[1:] if d != folder]


def main(argv):
    folder = pathlib.Path(argv[1]).resolve() if len(argv) > 1 else pathlib.Path(__file__).resolve().parent
    labels, table, errors = check(folder)
    if (folder / "operative.json").exists():
        n_op, op_errors = check_operative(folder / "operative.json", _label_dirs(folder))
        errors += op_errors
        print(f"operative.json: {n_op} operative spans checked")
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
