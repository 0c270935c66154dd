"""Self-check: build every family at every size and verify the planted facts.

    .venv/bin/python -m bench.devsets.selection.check [--tokenizer PATH] [--sizes 32k,128k]

Asserts, for every build: each fact sentence appears exactly once and sits at
its recorded span; its value (the checkable name/number) appears exactly once
in the whole document, inside the sentence; the token count is within 2% of
the target; the token spans match the sentence; a second build is identical.
Also checks facts.json itself (>= 15 facts a family, unique ids and values,
values absent from the real text). Prints a table and the wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

from .build import SIZES, build, families, load_facts, load_source

TOLERANCE = 0.02
_STOP = set("""a an the of to in on for and or by with from as at is are be been any all its it this that
these those which who what when where how long much many does do can may must shall will not no than
then after before each per into under over such other our we us you your if there their them they
would could should""".split())


def default_tokenizer_path() -> str:
    cache = os.environ.get("AGENTCTX_CACHE_DIR", str(Path.home() / ".cache" / "agentctx"))
    return str(Path(cache).expanduser() / "models" / "gemma-3-270m-q4_k_m")


def _words(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z][a-z-]+", s.lower()) if w not in _STOP and len(w) > 3}


def check_facts_file() -> list[str]:
    """Static checks of facts.json against the stored sources; returns notes on word overlap."""
    notes = []
    for fam in families():
        facts = load_facts(fam)
        assert len(facts) >= 15, f"{fam}: only {len(facts)} facts"
        ids = [f["id"] for f in facts]
        assert len(set(ids)) == len(ids), f"{fam}: duplicate ids"
        src = load_source(fam).lower()
        for f in facts:
            for key in ("id", "kind", "depth", "fact", "question", "answer", "value"):
                assert key in f, f"{fam}/{f.get('id')}: missing {key}"
            assert f["kind"] in ("plain", "buried", "long"), f["id"]
            assert 0.0 < f["depth"] < 1.0, f["id"]
            assert f["value"] in f["fact"], f"{f['id']}: value not in fact"
            assert f["value"].lower() not in src, f"{f['id']}: value {f['value']!r} occurs in the real text"
            others = [g for g in facts if g is not f]
            assert not any(f["value"].lower() in g["fact"].lower() for g in others), f"{f['id']}: value shared"
            shared = sorted(_words(f["question"]) & _words(f["fact"]))
            if shared:
                notes.append(f"{f['id']}: question shares {', '.join(shared)}")
    return notes


def check_doc(doc, target: int) -> dict:
    text = doc.text
    assert abs(doc.n_tokens - target) <= TOLERANCE * target, f"{doc.family}: {doc.n_tokens} tokens vs {target}"
    low = text.lower()
    crossing = long_total = 0
    max_dev = 0.0
    for f in doc.facts:
        assert text[f.char_start:f.char_end] == f.fact, f"{f.id}: span does not hold the fact"
        assert text.count(f.fact) == 1, f"{f.id}: fact appears {text.count(f.fact)} times"
        assert low.count(f.value.lower()) == 1, f"{f.id}: value {f.value!r} appears {low.count(f.value.lower())} times"
        v = low.find(f.value.lower())
        assert f.char_start <= v < f.char_end, f"{f.id}: value outside the fact"
        assert 0 <= f.token_start < f.token_end <= doc.n_tokens, f"{f.id}: bad token span"
        max_dev = max(max_dev, abs(f.char_start / len(text) - f.depth))
        if f.kind == "long":
            long_total += 1
            crossing += len(f.pages()) > 1 and len(f.pages(offset=1)) > 1  # with and without a BOS token
    return {"crossing": f"{crossing}/{long_total}", "max_dev": max_dev}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build and verify the page-selection dev set.")
    ap.add_argument("--tokenizer", default=default_tokenizer_path())
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of " + ",".join(SIZES))
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    t_start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    notes = check_facts_file()
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    header = f"{'family':<18} {'size':>5} {'target':>8} {'tokens':>8} {'dev%':>6} {'chars':>9} {'facts':>5} " \
             f"{'long x page':>11} {'depth dev':>9} {'secs':>6}  sha256"
    print(header)
    print("-" * len(header))
    n_docs = n_facts = 0
    for fam in families():
        for size in sizes:
            target = SIZES[size]
            t0 = time.perf_counter()
            doc = build(fam, target, tok)
            dt = time.perf_counter() - t0
            info = check_doc(doc, target)
            if size == sizes[0]:  # determinism: the same build again, from the warm cache
                again = build(fam, target, tok)
                assert again.text == doc.text and again.facts == doc.facts, f"{fam}/{size}: not deterministic"
            n_docs += 1
            n_facts += len(doc.facts)
            digest = hashlib.sha256(doc.text.encode()).hexdigest()[:12]
            dev = 100.0 * (doc.n_tokens - target) / target
            print(f"{fam:<18} {size:>5} {target:>8} {doc.n_tokens:>8} {dev:>+6.2f} {len(doc.text):>9} "
                  f"{len(doc.facts):>5} {info['crossing']:>11} {info['max_dev']:>9.3f} {dt:>6.1f}  {digest}")
    wall = time.perf_counter() - t_start
    if notes:
        print(f"\nquestions sharing a content word (4+ letters) with their fact: {len(notes)}")
        for line in notes:
            print("  " + line)
    print(f"\n{n_docs} documents, {n_facts} planted facts checked: all OK. wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
