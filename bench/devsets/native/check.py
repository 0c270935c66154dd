"""Build every native document and check its invariants (see README.md).

    python -m bench.devsets.native.check [32k,128k]
"""

from __future__ import annotations

import hashlib
import sys

from bench.devsets.native.build import SIZES, SOURCES, build, find_answer, load_questions
from bench.devsets.selection.check import _words


def check(sizes: tuple[str, ...] = ("32k", "128k"), tokenizer=None) -> list[str]:
    """Build every document; return one line per build. Raises if an invariant fails: each answer
    sentence once in the built text and inside the source span, tokens within 2% of the target,
    byte-identical on a second build."""
    if tokenizer is None:
        from bench.bench_selection import load_tokenizer
        tokenizer = load_tokenizer()
    lines = []
    for size in sizes:
        for key in SOURCES:
            d = build(key, SIZES[size], tokenizer)
            assert abs(d.n_tokens / d.target_tokens - 1) <= 0.02, (key, size, d.n_tokens)
            assert build(key, SIZES[size], tokenizer).text == d.text, (key, size, "not deterministic")
            s0, s1 = d.source_span
            for q in d.questions:
                for sentence, a in zip(q.answer_sentences, q.answers):
                    spans = find_answer(d.text, sentence)
                    assert spans == [(a.char_start, a.char_end)] and s0 <= a.char_start < a.char_end <= s1, q.id
            n_pages = sum(len(a.pages()) for q in d.questions for a in q.answers)
            lines.append(f"{key:12s} {size:5s} {d.n_tokens:7d} tokens ({d.n_tokens / d.target_tokens - 1:+.2%}) "
                         f"{len(d.text):7d} chars, source at {s0 / len(d.text):.2f}, {len(d.questions)} questions, "
                         f"{n_pages} answer pages, sha256 {hashlib.sha256(d.text.encode()).hexdigest()[:12]}")
    return lines


def word_overlap() -> list[str]:
    """Questions that share a content word (4+ letters, the planted set's stop list) with an answer."""
    notes = []
    for q in load_questions():
        shared = sorted(_words(q.question) & set().union(*(_words(s) for s in q.answer_sentences)))
        if shared:
            notes.append(f"{q.id}: {', '.join(shared)}")
    return notes


if __name__ == "__main__":
    print("questions sharing a content word with their answer:\n  " + "\n  ".join(word_overlap()))
    print("\n".join(check(tuple(sys.argv[1].split(",")) if len(sys.argv) > 1 else ("32k", "128k"))))
