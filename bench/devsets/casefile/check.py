"""Self-check: build the case file and verify every answer span.

    .venv/bin/python -m bench.devsets.casefile.check [--sizes 32k,128k]

Asserts, per build: each answer occurs once in its agreement and sits, whitespace-insensitively,
at its recorded span inside that agreement's span; the token count is within 2% of the target;
the token spans cover the answer; a second build is identical. Lists the documents
``agentctx.retrieval.documents`` finds and which questions ``question_document`` scopes.
"""

from __future__ import annotations

import argparse

from bench.bench_selection import load_tokenizer

from .build import SIZES, build, families


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="32k")
    args = ap.parse_args(argv)
    from agentctx.agents.question_scope import question_document
    from agentctx.retrieval.documents import documents_of

    tok = load_tokenizer()
    for size in args.sizes.split(","):
        for fam in families():
            doc = build(fam, SIZES[size], tok)
            assert abs(doc.n_tokens - SIZES[size]) <= 0.02 * SIZES[size], doc.n_tokens
            assert build(fam, SIZES[size], tok).text == doc.text
            offs = tok(doc.text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            for f in doc.facts:
                a, b = doc.spans[f.doc]
                assert a <= f.char_start < f.char_end <= b, f.id
                assert doc.text[f.char_start:f.char_end].split() == f.answer.split(), f.id
                assert offs[f.token_start][0] <= f.char_start and offs[f.token_end - 1][1] >= f.char_end, f.id
            parts = documents_of(doc.text)
            print(f"{fam} {size}: {doc.n_tokens:,} tokens, {len(doc.facts)} questions "
                  f"({sum(f.names for f in doc.facts)} name their agreement); agreements at {doc.spans}")
            for p in parts:
                print(f"  document {p.index} [{p.how}] {p.start}-{p.end}: {p.name[:60]!r}")
            scoped = [f.id for f in doc.facts if question_document(f.question, parts) is not None]
            print(f"  question_document scopes {len(scoped)}: {', '.join(scoped)}")
    print("ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
