"""Build long test documents around one real source document whose own sentences answer the questions.

``build(doc, n_tokens, tokenizer)`` places the source document (``SOURCES``)
whole, under a separator line, at a fixed depth fraction inside filler made
of other real texts: the three stored families of the planted-fact dev set
(``bench/devsets/selection/sources``), taken only from the part that set's
32K and 128K documents never use, in rotation (licences, Debian copyright
files, GNU manuals) in slices of about ``_SLICE_CHARS``. A filler piece (a
member, or a part of a long manual) is left out if it copies or varies a
source document (it holds ``_MAX_SHARED`` or more of the source's 8-word
shingles: the ScanCode copies, AGPL-3.0, ECL-2.0, the MPL-1.1 family, the
gzip manual itself...) or holds a near-copy of an answer sentence (half or more
of its shingles: e.g. the GFDL appendix of every GNU manual repeats GPL-3's
termination sentences), so that every answer sentence occurs once, in the source.

Answer sentences (``questions.json``) are matched whitespace-insensitively (the
texts are hard-wrapped; MPL-2.0's sections 6-7 sit in a ``*`` box), and each
match's exact span is recorded. Deterministic for a given tokenizer.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from bench.devsets.selection import PAGE_SIZE, SIZES, load_source
from bench.devsets.selection.build import HERE as SELECTION_DIR
from bench.devsets.selection.prepare_sources import separator
from bench.devsets.selection.text import normalise

__all__ = ["SIZES", "PAGE_SIZE", "SOURCES", "Source", "Answer", "NativeQuestion", "NativeDoc",
           "load_questions", "source_text", "find_answer", "build"]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    depth: float  # where the source starts, as a fraction of the filler's tokens
    origin: str  # registry, package and version, path in the package
    sha256: str  # of the original file (licences) or of the text used (the manual)


SOURCES: dict[str, Source] = {s.key: s for s in [
    Source("gpl-3.0", "GNU General Public License, version 3", 0.30,
           "Debian bookworm base-files 12.4+deb12u11: /usr/share/common-licenses/GPL-3",
           "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986"),
    Source("apache-2.0", "Apache License, Version 2.0", 0.55,
           "Debian bookworm base-files 12.4+deb12u11: /usr/share/common-licenses/Apache-2.0",
           "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"),
    Source("mpl-2.0", "Mozilla Public License, version 2.0", 0.80,
           "Debian bookworm base-files 12.4+deb12u11: /usr/share/common-licenses/MPL-2.0",
           "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85"),
    Source("gzip-manual", "GNU Gzip manual, chapters 1-7", 0.15,
           "Debian bookworm gzip 1.12-1: /usr/share/info/gzip.info.gz, from the planted-fact dev set's "
           "stored gnu-manuals text, up to the GFDL appendix",
           "see source_text(): checked against the stored family text"),
]}

# The planted-fact dev set's 128K documents (README there) hold at most these many chars of each
# family's text, and its 32K documents a prefix of those: filler starts at the first member beyond.
_DEV_PREFIX_CHARS = {"oss-licenses": 603_155, "debian-copyright": 494_594, "gnu-manuals": 513_383}
_FAMILIES = ("oss-licenses", "debian-copyright", "gnu-manuals")
_SLICE_CHARS = 16_000  # filler rotates between families in slices of at least this many chars
_SHINGLE = 8  # words
_MAX_SHARED = 0.10  # a filler piece sharing this share of a source's shingles is left out
_NEAR_COPY = 0.5  # ... and one holding this share of an answer sentence's shingles
_MAX_FILLER_TOKENS = 200_000  # filler prepared (the 128K build needs about 125K)


# --------------------------------------------------------------------------- questions and sources


@dataclass(frozen=True)
class Answer:
    """One answer sentence as found in a built document: ``text[char_start:char_end]``."""

    char_start: int
    char_end: int
    token_start: int = 0  # half-open span in tokenizer(text, add_special_tokens=False)
    token_end: int = 0

    def pages(self, page_size: int = PAGE_SIZE) -> range:
        return range(self.token_start // page_size, (self.token_end - 1) // page_size + 1)


@dataclass(frozen=True)
class NativeQuestion:
    id: str
    doc: str
    question: str
    value: str
    answer_sentences: tuple[str, ...]  # as written in questions.json (alternatives)
    answers: tuple[Answer, ...] = ()  # their spans in a built document, same order


@dataclass(frozen=True)
class NativeDoc:
    doc: str
    target_tokens: int
    text: str
    n_tokens: int
    source_span: tuple[int, int]  # chars of the source text (after its separator line)
    questions: tuple[NativeQuestion, ...]


def load_questions(doc: str | None = None) -> list[NativeQuestion]:
    raw = json.loads((HERE / "questions.json").read_text(encoding="utf-8"))["questions"]
    return [NativeQuestion(q["id"], q["doc"], q["question"], q["value"], tuple(q["answer_sentences"]))
            for q in raw if doc is None or q["doc"] == doc]


@functools.lru_cache(maxsize=None)
def source_text(doc: str) -> str:
    """The source document's real text (normalised like the dev set's texts; no other change)."""
    if doc == "gzip-manual":
        fam = load_source("gnu-manuals")
        member = next(m for m in _manifest()["gnu-manuals"]["members"] if m["package"] == "gzip")
        text = fam[member["char_start"]:member["char_start"] + member["chars"]]
        text = text[text.index("\n\n") + 2:]  # drop the family's separator line
        return text[:text.index("File: gzip.info,  Node: GNU Free Documentation License")].rstrip("\n")
    raw = gzip.decompress((HERE / "sources" / f"{doc}.txt.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != SOURCES[doc].sha256:
        raise ValueError(f"sources/{doc}.txt.gz does not match the recorded sha256")
    return normalise(raw.decode("utf-8")).strip("\n")


def _answer_pattern(sentence: str) -> re.Pattern:
    # Line wraps and indentation vary; MPL-2.0 frames sections 6-7 in '*' margins.
    return re.compile(r"[\s*]+".join(re.escape(w) for w in sentence.split()))


def find_answer(text: str, sentence: str) -> list[tuple[int, int]]:
    """Char spans of ``sentence`` in ``text``, whitespace-insensitively."""
    return [(m.start(), m.end()) for m in _answer_pattern(sentence).finditer(text)]


# --------------------------------------------------------------------------- filler


def _manifest() -> dict:
    return json.loads((SELECTION_DIR / "sources" / "manifest.json").read_text(encoding="utf-8"))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _shingles(text: str) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + _SHINGLE]) for i in range(len(w) - _SHINGLE + 1)}


@functools.lru_cache(maxsize=None)
def _exclusion_sets() -> tuple[dict[str, set], list[set]]:
    sources = {k: _shingles(source_text(k)) for k in SOURCES}
    answers = [_shingles(s) for q in load_questions() for s in q.answer_sentences]
    return sources, [a for a in answers if a]


def _copies_source(text: str) -> str:
    """Why a filler member copies or varies a source document ("" if it does not)."""
    sources, _ = _exclusion_sets()
    sh = _shingles(text)
    for key, ssh in sources.items():
        if len(sh & ssh) >= _MAX_SHARED * len(ssh):
            return f"copies or varies {key}"
    return ""


def _holds_answer(text: str) -> str:
    """Why a filler piece holds a near-copy of an answer sentence ("" if it does not)."""
    _, answers = _exclusion_sets()
    sh = _shingles(text)
    return "holds a near-copy of an answer sentence" if any(len(sh & a) >= _NEAR_COPY * len(a)
                                                             for a in answers) else ""


def _paragraph_cuts(text: str, every: int) -> list[int]:
    """Paragraph starts at least ``every`` chars apart (0 first)."""
    cuts = [0]
    for m in re.finditer(r"\n[ \t]*\n(?=\S)", text):
        if m.end() - cuts[-1] >= every:
            cuts.append(m.end())
    return cuts


@functools.lru_cache(maxsize=None)
def filler_pieces() -> tuple[tuple[str, str, str, str], ...]:
    """``(family, title, text, why_left_out)`` of every filler piece beyond the dev prefix, in family
    order. A piece is a whole member, or a part of about ``_SLICE_CHARS`` of a GNU manual, so that
    one manual's GFDL appendix (it repeats GPL-3's termination sentences) drops alone; a member that
    copies or varies a source drops whole, all its parts with it."""
    out = []
    man = _manifest()
    for fam in _FAMILIES:
        src = load_source(fam)
        for m in man[fam]["members"]:
            if m["char_start"] < _DEV_PREFIX_CHARS[fam]:
                continue
            # A member runs from its separator line to the end of its text.
            head = src.index("\n\n", m["char_start"]) + 2
            text = src[m["char_start"]:head + m["chars"]]
            copies = _copies_source(text)
            if fam != "gnu-manuals" or len(text) <= 2 * _SLICE_CHARS:
                out.append((fam, m["title"], text, copies or _holds_answer(text)))
                continue
            cuts = _paragraph_cuts(text, _SLICE_CHARS) + [len(text)]
            for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
                part = text[a:b].rstrip("\n")
                if part.strip():
                    out.append((fam, f"{m['title']} (part {i + 1})", part, copies or _holds_answer(part)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _filler_slices(tokenizer) -> tuple[tuple[str, int], ...]:
    """Filler slices in rotation order (one per family in turn, each of at least ``_SLICE_CHARS``
    of consecutive usable pieces), ``(text, n_tokens)``, about ``_MAX_FILLER_TOKENS`` in all."""
    queues: dict[str, list[str]] = {f: [] for f in _FAMILIES}
    for fam, _title, text, why in filler_pieces():
        if not why:
            queues[fam].append(text.rstrip("\n"))
    slices: list[str] = []
    total_chars = 0
    while total_chars < 5 * _MAX_FILLER_TOKENS and any(queues.values()):
        for fam in _FAMILIES:
            parts: list[str] = []
            while queues[fam] and sum(map(len, parts)) < _SLICE_CHARS:
                parts.append(queues[fam].pop(0))
            if parts:
                slices.append("\n\n".join(parts))
                total_chars += len(slices[-1])
    enc = tokenizer(slices, add_special_tokens=False)["input_ids"]
    return tuple((s, len(ids)) for s, ids in zip(slices, enc))


def _cut_to_tokens(text: str, n_tokens: int, tokenizer) -> str:
    """The longest prefix of ``text`` ending at a paragraph end with at most ``n_tokens`` tokens."""
    offs = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if n_tokens >= len(offs):
        return text
    limit = offs[n_tokens][0]
    ends = [m.start() for m in re.finditer(r"\n[ \t]*\n", text[:limit])]
    return text[:ends[-1]] if ends else ""


# --------------------------------------------------------------------------- build


def build(doc: str, n_tokens: int, tokenizer) -> NativeDoc:
    """The ``doc`` source inside real filler, about ``n_tokens`` Gemma tokens, with answer spans."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("build() needs a fast (Rust) Hugging Face tokenizer for offset mappings")
    spec = SOURCES[doc]
    head = separator(spec.title) + "\n\n"
    body = source_text(doc)
    src_tokens = len(tokenizer(head + body, add_special_tokens=False)["input_ids"])
    need = n_tokens - src_tokens
    if need <= 0:
        raise ValueError(f"n_tokens={n_tokens} is below the source's {src_tokens} tokens")
    parts: list[str] = []
    cum = [0]  # tokens before each part
    for text, nt in _filler_slices(tokenizer):
        if cum[-1] + nt > need:
            cut = _cut_to_tokens(text, need - cum[-1], tokenizer)
            if cut.strip():
                parts.append(cut)
                cum.append(cum[-1] + len(tokenizer(cut, add_special_tokens=False)["input_ids"]))
            break
        parts.append(text)
        cum.append(cum[-1] + nt)
    else:
        raise ValueError(f"not enough filler for {n_tokens} tokens")
    at = min(range(len(parts) + 1), key=lambda i: (abs(cum[i] - spec.depth * cum[-1]), i))
    before = "\n\n".join(parts[:at])
    prefix = before + ("\n\n" if before else "") + head
    text = prefix + body + ("\n\n" + "\n\n".join(parts[at:]) if parts[at:] else "") + "\n"
    s0 = len(prefix)

    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    t_starts = [o[0] for o in enc]
    t_ends = [o[1] for o in enc]
    questions = []
    for q in load_questions(doc):
        answers = []
        for sentence in q.answer_sentences:
            spans = find_answer(body, sentence)
            if len(spans) != 1:
                raise ValueError(f"{q.id}: answer sentence found {len(spans)} times in the {doc} source")
            cs, ce = s0 + spans[0][0], s0 + spans[0][1]
            answers.append(Answer(cs, ce, bisect.bisect_right(t_ends, cs), bisect.bisect_left(t_starts, ce)))
        questions.append(NativeQuestion(q.id, q.doc, q.question, q.value, q.answer_sentences, tuple(answers)))
    return NativeDoc(doc, n_tokens, text, len(enc), (s0, s0 + len(body)), tuple(questions))

