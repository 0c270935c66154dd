"""Build a case file: four real agreements, each after a stretch of real GNU-manual text.

``build(family, n_tokens, tokenizer)`` joins the agreements of ``facts.json`` (texts in
``bench/devsets/contracts``, referenced by path and checked by sha256) with filler taken from the
planted set's stored GNU manuals (``bench/devsets/selection/sources/gnu-manuals.txt.gz``), from
``FILLER_START`` on, paragraph by paragraph, leaving out every paragraph that names a licence,
agreement, warranty or liability (so no filler paragraph reads as one more legal clause). The
filler is cut into ``len(agreements) + 1`` stretches of equal token share: filler, agreement,
filler, ..., agreement, filler. No headers or separators: where one document ends and the next
begins is for ``agentctx.retrieval.documents`` to find, as in a real case file.

Answers (``facts.json``) are matched whitespace-insensitively inside their agreement; the span in
the built text is recorded. Deterministic for a given tokenizer.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from bench.devsets.selection import PAGE_SIZE, SIZES, load_source

__all__ = ["SIZES", "PAGE_SIZE", "Fact", "CaseDoc", "families", "load_facts", "agreement_text", "build"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FILLER_FAMILY = "gnu-manuals"
FILLER_START = 1_500_000  # chars into the family text: past the part the planted 32K/128K sets use
_LEGAL = re.compile(r"licen[cs]|agreement|warrant|liab|copyright|contract", re.I)


@dataclass(frozen=True)
class Fact:
    """One question and its answer span ``text[char_start:char_end]`` in a built document."""

    id: str
    doc: str  # agreement key
    names: bool  # the question names its agreement (several hold the same kind of clause)
    question: str
    answer: str
    char_start: int
    char_end: int
    token_start: int  # half-open span in tokenizer(text, add_special_tokens=False)
    token_end: int

    def pages(self, page_size: int = PAGE_SIZE) -> range:
        return range(self.token_start // page_size, (self.token_end - 1) // page_size + 1)


@dataclass(frozen=True)
class CaseDoc:
    family: str
    target_tokens: int
    text: str
    n_tokens: int
    spans: dict[str, tuple[int, int]]  # agreement key -> its char span
    facts: tuple[Fact, ...]


@functools.lru_cache(maxsize=None)
def _spec() -> dict:
    return json.loads((HERE / "facts.json").read_text(encoding="utf-8"))


def families() -> list[str]:
    return list(_spec()["families"])


def load_facts(family: str) -> list[dict]:
    return list(_spec()["families"][family]["facts"])


@functools.lru_cache(maxsize=None)
def agreement_text(key: str) -> str:
    a = next(a for a in _spec()["agreements"] if a["key"] == key)
    raw = (ROOT / a["path"]).read_bytes()
    if hashlib.sha256(raw).hexdigest() != a["sha256"]:
        raise ValueError(f"{a['path']} does not match the sha256 recorded in facts.json")
    return raw.decode("utf-8").strip("\n")


def find_answer(text: str, sentence: str) -> list[tuple[int, int]]:
    """Char spans of ``sentence`` in ``text``, whitespace-insensitively."""
    pat = re.compile(r"\s+".join(re.escape(w) for w in sentence.split()))
    return [(m.start(), m.end()) for m in pat.finditer(text)]


@functools.lru_cache(maxsize=None)
def _filler_paragraphs() -> tuple[str, ...]:
    src = load_source(FILLER_FAMILY)[FILLER_START:]
    src = src[src.index("\n\n") + 2:]  # start at a paragraph
    paras = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", src)]
    return tuple(p for p in paras if p.strip() and not _LEGAL.search(p) and not p.startswith("========"))


def build(family: str, n_tokens: int, tokenizer) -> CaseDoc:
    """The case file of ``family`` at about ``n_tokens`` Gemma tokens, with answer spans."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("build() needs a fast (Rust) Hugging Face tokenizer for offset mappings")
    keys = [a["key"] for a in _spec()["agreements"]]
    bodies = [agreement_text(k) for k in keys]
    ntok = lambda s: len(tokenizer(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    need = n_tokens - sum(ntok(b) for b in bodies)
    if need <= 0:
        raise ValueError(f"n_tokens={n_tokens} is below the agreements' own tokens")
    paras, counts, total = [], [], 0
    for p in _filler_paragraphs():
        if total >= need:
            break
        c = ntok(p) + 1  # the blank line joining it
        paras.append(p)
        counts.append(c)
        total += c
    else:
        raise ValueError(f"not enough filler for {n_tokens} tokens")
    # Stretch i ends where the running token count passes (i + 1) / (n + 1) of the filler.
    stretches, cur, run, k = [], [], 0, len(bodies) + 1
    for p, c in zip(paras, counts):
        cur.append(p)
        run += c
        if len(stretches) < k - 1 and run >= (len(stretches) + 1) * total / k:
            stretches.append(cur)
            cur = []
    stretches.append(cur)
    text, spans = "", {}
    for i, key in enumerate(keys):
        text += "\n\n".join(stretches[i]) + "\n\n"
        spans[key] = (len(text), len(text) + len(bodies[i]))
        text += bodies[i] + "\n\n"
    text += "\n\n".join(stretches[-1]) + "\n"

    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    t_starts, t_ends = [o[0] for o in enc], [o[1] for o in enc]
    facts = []
    for f in load_facts(family):
        a0, _ = spans[f["doc"]]
        found = find_answer(bodies[keys.index(f["doc"])], f["answer"])
        if len(found) != 1:
            raise ValueError(f"{f['id']}: answer found {len(found)} times in {f['doc']}")
        cs, ce = a0 + found[0][0], a0 + found[0][1]
        facts.append(Fact(f["id"], f["doc"], f["names"], f["question"], f["answer"], cs, ce,
                          bisect.bisect_right(t_ends, cs), bisect.bisect_left(t_starts, ce)))
    return CaseDoc(family, n_tokens, text, len(enc), spans, tuple(facts))
