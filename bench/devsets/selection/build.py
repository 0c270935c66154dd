"""Build a long document of real text with planted facts, at a given Gemma token count.

``build(family, n_tokens, tokenizer)`` takes the family's stored real text
(``sources/<family>.txt.gz``), cuts a prefix at a paragraph end so that the
finished document has about ``n_tokens`` tokens, and inserts each of the
family's facts (``facts.json``) at the same depth fraction of the body:

* ``plain``: the fact is its own paragraph, placed at the paragraph boundary
  nearest to its depth, indented like the paragraph that follows it (inside a
  Debian ``License:`` body the boundary is a `` .`` line and the fact is
  inserted as one more `` .``-separated paragraph; between two Debian
  copyright stanzas it becomes a ``Comment:`` field of the first).
* ``buried``: the fact is inserted after a sentence in the middle of an
  unrelated prose paragraph near its depth.
* ``long``: a long sentence inserted as its own paragraph at a boundary near
  its depth chosen so that its tokens straddle a 256-token page boundary
  (at least ``_CROSS_MARGIN`` tokens on each side, counted without special
  tokens; :attr:`PlantedFact.crosses_page` says whether it does).

Everything is deterministic for a given tokenizer. Only the standard library
and the tokenizer (a fast Hugging Face tokenizer, for offsets) are used.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from .text import normalise

__all__ = ["SIZES", "PAGE_SIZE", "PlantedFact", "Doc", "families", "build", "load_facts", "load_source"]

HERE = Path(__file__).resolve().parent
SIZES = {"32k": 32768, "128k": 131072, "1m": 1048576}
PAGE_SIZE = 256

_CROSS_MARGIN = 12  # tokens of a "long" fact on each side of the page boundary it straddles
_WINDOW = 0.03  # places within this fraction of the document of a fact's depth are preferred
_LONG_CANDIDATES = 30  # places tried, best first, for a "long" fact to straddle a page boundary
_CUT_TOLERANCE = 0.004  # how far below the token target the paragraph-end cut may fall
_CHUNK_CHARS = 64_000  # the source is tokenized in chunks of about this size
_STYLE_CONTEXT = 20_000  # chars each side looked at to match a fact's quote style


@dataclass(frozen=True)
class PlantedFact:
    """One planted sentence. ``text[char_start:char_end] == fact``.

    ``token_start``/``token_end`` are the half-open token span of the sentence
    in ``tokenizer(text, add_special_tokens=False)``; a BOS token shifts them by one.
    """

    id: str
    question: str
    answer: str
    fact: str
    char_start: int
    char_end: int
    value: str = ""
    kind: str = "plain"
    depth: float = 0.0
    token_start: int = 0
    token_end: int = 0

    @property
    def crosses_page(self) -> bool:
        return self.token_start // PAGE_SIZE != (self.token_end - 1) // PAGE_SIZE

    def pages(self, page_size: int = PAGE_SIZE, offset: int = 0) -> range:
        """Pages (of ``page_size`` tokens) the sentence touches; ``offset`` = special tokens prepended."""
        return range((self.token_start + offset) // page_size, (self.token_end - 1 + offset) // page_size + 1)


@dataclass(frozen=True)
class Doc:
    family: str
    target_tokens: int
    text: str
    facts: list[PlantedFact] = field(default_factory=list)
    n_tokens: int = 0  # tokens of ``text`` without special tokens


# --------------------------------------------------------------------------- data


def _facts_file() -> dict:
    return json.loads((HERE / "facts.json").read_text(encoding="utf-8"))


def families() -> list[str]:
    return list(_facts_file()["families"])


def load_facts(family: str) -> list[dict]:
    fams = _facts_file()["families"]
    if family not in fams:
        raise KeyError(f"unknown family {family!r}; known: {sorted(fams)}")
    return sorted(fams[family]["facts"], key=lambda f: f["depth"])


@functools.lru_cache(maxsize=None)
def load_source(family: str) -> str:
    """The family's real text, as stored (already normalised; normalising again is a no-op)."""
    with gzip.open(HERE / "sources" / f"{family}.txt.gz", "rt", encoding="utf-8") as fh:
        return normalise(fh.read())


# --------------------------------------------------------------------------- paragraphs


@dataclass(frozen=True)
class _Para:
    start: int  # first char of the first line
    end: int  # end of the last line (its "\n" excluded)
    indent: str  # leading blanks of the first line
    sep: str  # separator before it: "blank" (an empty line) or "dot" (a Debian " ." line)
    text: str


_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9-]*:(\s|$)")
_SENT_END = re.compile(r"[a-z0-9)]\.(?=[ \n]+[A-Z\"(])")


def _paragraphs(text: str) -> list[_Para]:
    paras: list[_Para] = []
    pos = 0
    cur_start = None
    cur_end = 0
    sep = "blank"
    pending_sep = "blank"
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        is_blank = body.strip() == ""
        is_dot = body.startswith(" ") and body.strip() == "."
        if is_blank or is_dot:
            if cur_start is not None:
                paras.append(_Para(cur_start, cur_end, _indent(text, cur_start), sep, text[cur_start:cur_end]))
                cur_start = None
                pending_sep = "dot" if is_dot else "blank"
            elif is_blank:
                pending_sep = "blank"
        else:
            if cur_start is None:
                cur_start = pos
                sep = pending_sep
            cur_end = pos + len(body)
        pos += len(line)
    if cur_start is not None:
        paras.append(_Para(cur_start, cur_end, _indent(text, cur_start), sep, text[cur_start:cur_end]))
    return paras


def _indent(text: str, start: int) -> str:
    m = re.match(r"[ \t]*", text[start:start + 16])
    return m.group(0) if m else ""


def _is_prose(p: _Para, min_len: int = 120) -> bool:
    s = p.text.lstrip()
    if len(p.indent) > 8 or len(p.text) < min_len or not s:
        return False
    if not (s[0].isalnum() or s[0] in "\"'(`"):
        return False
    if _FIELD.match(s) or s.startswith("=" * 4):
        return False
    lines = p.text.split("\n")
    if any(len(line) - len(line.lstrip()) > len(p.indent) + 4 for line in lines[1:]):
        return False  # a code block or table, not running text
    if _is_list(p):
        return False
    return ". " in p.text or ".\n" in p.text or p.text.rstrip().endswith(".")


def _is_list(p: _Para) -> bool:
    """An Info menu or index, or another list of "* " items."""
    lines = p.text.split("\n")
    items = sum(line.lstrip().startswith("* ") for line in lines)
    return items >= max(2, len(lines) // 4)


def _is_text(p: _Para) -> bool:
    """Good enough to precede an inserted paragraph: not a heading, separator or menu."""
    s = p.text.lstrip()
    last = p.text.rstrip().rsplit("\n", 1)[-1].strip()
    if last and set(last) <= set("=*-.~_#"):
        return False  # a heading's underline
    return len(p.text) >= 60 and not s.startswith(("=" * 4, "*", "File: ")) and "\n" in p.text.strip() or (
        len(p.text) >= 120 and not s.startswith("=" * 4))


# --------------------------------------------------------------------------- build


def _encode(tokenizer, text: str, offsets: bool = False):
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)
    return enc


def _ntok(tokenizer, text: str) -> int:
    return len(_encode(tokenizer, text)["input_ids"])


@dataclass
class _Insert:
    pos: int  # insertion point in the body
    text: str  # inserted string
    fact_offset: int  # where the fact starts inside ``text``
    spec: dict
    fact: str  # the sentence as inserted (quote style matched to the context)
    ntok: int = 0


def _restyle(fact: str, context: str) -> str:
    """Use plain ASCII quotes where the surrounding text has no typographic ones."""
    if "\u2018" in fact and "\u2018" not in context and "'" in context:
        return fact.replace("\u2018", "'").replace("\u2019", "'")
    return fact


class _SourceTokens:
    """Token start offsets of a family's source, computed chunk by chunk as far as needed.

    Chunks end at paragraph boundaries, where the tokenizer never merges across
    (a token starts right after an empty line), so the concatenated offsets are
    those of tokenizing the whole prefix. Batches of chunks are encoded in parallel.
    """

    def __init__(self, src: str, tokenizer) -> None:
        self.src = src
        self.tokenizer = tokenizer
        self.bounds = [0]
        for m in re.finditer(r"\n\n(?=\S)", src):
            if m.end() - self.bounds[-1] >= _CHUNK_CHARS:
                self.bounds.append(m.end())
        if self.bounds[-1] != len(src):
            self.bounds.append(len(src))
        self.starts = array("q")
        self.done = 0  # chunks encoded

    def ensure(self, n_tokens: int) -> None:
        """Encode until more than ``n_tokens`` tokens are known, or the source is exhausted."""
        n_chunks = len(self.bounds) - 1
        while len(self.starts) <= n_tokens and self.done < n_chunks:
            ratio = (self.bounds[self.done] / len(self.starts)) if self.starts else 4.0
            need = int((n_tokens - len(self.starts)) * ratio * 1.02 / _CHUNK_CHARS) + 1
            stop = min(n_chunks, self.done + max(need, 2))
            texts = [self.src[self.bounds[i]:self.bounds[i + 1]] for i in range(self.done, stop)]
            enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
            for i, offs in zip(range(self.done, stop), enc["offset_mapping"]):
                base = self.bounds[i]
                self.starts.extend(base + int(o[0]) for o in offs)
            self.done = stop


_TOKEN_CACHE: dict[tuple[str, int], _SourceTokens] = {}


def _source_tokens(family: str, tokenizer) -> _SourceTokens:
    key = (family, id(tokenizer))
    st = _TOKEN_CACHE.get(key)
    if st is None or st.tokenizer is not tokenizer:
        st = _TOKEN_CACHE[key] = _SourceTokens(load_source(family), tokenizer)
    return st


def _cut_body(st: _SourceTokens, body_target: int) -> tuple[str, array]:
    """A prefix of the source ending at a paragraph end, with about ``body_target`` tokens."""
    st.ensure(body_target)
    src, starts = st.src, st.starts
    if len(starts) <= body_target:
        raise ValueError(f"source has only {len(starts)} tokens; {body_target} needed")
    cut = starts[body_target]
    floor = int(body_target * (1 - _CUT_TOLERANCE))
    # Last paragraph end at or before the cut, else the last line end.
    end = None
    lo = max(0, cut - 200_000)
    for m in re.finditer(r"\n[ \t]*\n", src[lo:cut]):
        end = lo + m.start()
    if end is None or bisect.bisect_left(starts, end) < floor:
        end = src.rfind("\n", 0, cut)
    body = src[:end + 1]  # ends with the paragraph's last line and its newline
    return body, starts[:bisect.bisect_left(starts, end)]


def _place(body: str, starts: array, specs: list[dict], tokenizer) -> list[_Insert]:
    """Where each fact goes. Candidates near the fact's depth are ranked by tier, then distance:

    tier 1: between two prose paragraphs (or, for ``buried``, inside a prose paragraph);
    tier 2: any other paragraph boundary that is not a separator or heading (inside a
    Debian machine-readable stanza the fact becomes a ``Comment:`` field of that stanza),
    or inside any paragraph with a sentence end.
    Tiers 1 and 2 are searched within ``_WINDOW`` of the depth; beyond it, the nearest tier-1
    place anywhere.
    """
    paras = _paragraphs(body)

    def token_starts_at(pos: int) -> bool:
        k = bisect.bisect_left(starts, pos)
        return k < len(starts) and starts[k] == pos
    para_starts = [p.start for p in paras]
    n = len(body)
    used: set[int] = set()  # paragraph indices touched by an insertion
    inserts: list[_Insert] = []

    def separator(p: _Para) -> bool:
        s = p.text.lstrip()
        return s.startswith(("=" * 4, "File: ")) or len(p.text) < 40 or _is_list(p)

    def boundary(i: int, spec: dict) -> tuple[int, _Insert] | None:
        """(tier, insert) for a fact placed before paragraph i, or None."""
        if not (0 < i < len(paras)) or i in used or i - 1 in used:
            return None
        p, prev = paras[i], paras[i - 1]
        if not token_starts_at(p.start) or separator(p) or separator(prev):
            return None
        if _is_prose(p) and _is_text(prev):
            tier = 1
        elif p.sep == "blank" and len(p.indent) <= 8:
            tier = 2
        else:
            return None
        fact = _restyle(spec["fact"], body[max(0, p.start - _STYLE_CONTEXT):p.start + _STYLE_CONTEXT])
        if p.sep == "blank" and _FIELD.match(prev.text) and _FIELD.match(p.text):
            # Between two Debian copyright stanzas: a Comment field of the first one.
            return tier, _Insert(prev.end, "\nComment: " + fact, len("\nComment: "), spec, fact)
        indent = p.indent if p.sep == "blank" else (p.indent or " ")
        tail = "\n\n" if p.sep == "blank" else "\n .\n"
        return tier, _Insert(p.start, indent + fact + tail, len(indent), spec, fact)

    def inside(i: int, spec: dict) -> tuple[int, _Insert] | None:
        """(tier, insert) for a fact placed after a sentence in the middle of paragraph i."""
        p = paras[i]
        if i in used or separator(p) or len(p.text) < 200:
            return None
        ends = [p.start + m.start() + 2 for m in _SENT_END.finditer(p.text)]
        ends = [e for e in ends if p.start + 80 <= e <= p.end - 80]
        if not ends:
            return None
        mid = (p.start + p.end) // 2
        q = min(ends, key=lambda e: (abs(e - mid), e))
        fact = _restyle(spec["fact"], body[max(0, q - _STYLE_CONTEXT):q + _STYLE_CONTEXT])
        return (1 if _is_prose(p, 300) else 2), _Insert(q, " " + fact, 1, spec, fact)

    def ranked(spec: dict):
        """Candidate (paragraph index, insert), best first."""
        target = int(spec["depth"] * n)
        make = inside if spec["kind"] == "buried" else boundary
        near, far = [], []
        idx = bisect.bisect_left(para_starts, target)
        lo, hi = idx - 1, idx
        while lo >= 0 or hi < len(paras):
            if hi < len(paras) and (lo < 0 or paras[hi].start - target <= target - paras[lo].start):
                i, hi = hi, hi + 1
            else:
                i, lo = lo, lo - 1
            dist = abs(paras[i].start - target)
            got = make(i, spec)
            if got is None:
                continue
            tier, ins = got
            if dist <= _WINDOW * n:
                near.append((tier, dist, i, ins))
            elif tier == 1:
                far.append((tier, dist, i, ins))
                if len(far) >= _LONG_CANDIDATES:
                    break
        near.sort(key=lambda c: (c[0], c[1]))
        return [(i, ins) for _, _, i, ins in near + far]

    long_specs = []
    for spec in specs:
        if spec["kind"] == "long":
            long_specs.append(spec)
            continue
        cands = ranked(spec)
        if not cands:
            raise ValueError(f"no place for fact {spec['id']}")
        i, ins = cands[0]
        used.add(i)
        ins.ntok = _ntok(tokenizer, ins.text)
        inserts.append(ins)

    for spec in long_specs:  # in depth order; each sees every insertion decided before it
        cands = ranked(spec)
        if not cands:
            raise ValueError(f"no place for fact {spec['id']}")
        chosen = cands[0]
        for i, cand in cands[:_LONG_CANDIDATES]:
            shift = sum(x.ntok for x in inserts if x.pos < cand.pos)
            t0 = bisect.bisect_left(starts, cand.pos) + shift + _ntok(tokenizer, cand.text[:cand.fact_offset])
            t1 = t0 + _ntok(tokenizer, cand.fact)
            m = (t0 + _CROSS_MARGIN + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
            if m <= t1 - _CROSS_MARGIN:
                chosen = (i, cand)
                break
        used.add(chosen[0])
        chosen[1].ntok = _ntok(tokenizer, chosen[1].text)
        inserts.append(chosen[1])
    return sorted(inserts, key=lambda x: x.pos)


def build(family: str, n_tokens: int, tokenizer) -> Doc:
    """The ``family`` document with about ``n_tokens`` tokens (within 0.5%) and its planted facts."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("build() needs a fast (Rust) Hugging Face tokenizer for offset mappings")
    specs = load_facts(family)
    fact_cost = sum(_ntok(tokenizer, s["fact"]) + 2 for s in specs)
    body_target = n_tokens - fact_cost
    if body_target <= 0:
        raise ValueError(f"n_tokens={n_tokens} is too small for {len(specs)} facts")
    body, starts = _cut_body(_source_tokens(family, tokenizer), body_target)
    inserts = _place(body, starts, specs, tokenizer)

    parts: list[str] = []
    spans: list[tuple[dict, int, int, str]] = []
    prev = 0
    length = 0
    for ins in inserts:
        parts.append(body[prev:ins.pos])
        length += ins.pos - prev
        start = length + ins.fact_offset
        spans.append((ins.spec, start, start + len(ins.fact), ins.fact))
        parts.append(ins.text)
        length += len(ins.text)
        prev = ins.pos
    parts.append(body[prev:])
    text = "".join(parts)

    enc = _encode(tokenizer, text, offsets=True)
    t_starts = [o[0] for o in enc["offset_mapping"]]
    t_ends = [o[1] for o in enc["offset_mapping"]]
    facts = []
    for spec, cs, ce, fact in sorted(spans, key=lambda s: s[1]):
        ts = bisect.bisect_right(t_ends, cs)  # first token ending after the sentence starts
        te = bisect.bisect_left(t_starts, ce)  # first token starting at/after its end
        facts.append(PlantedFact(
            id=spec["id"], question=spec["question"], answer=spec["answer"], fact=fact,
            char_start=cs, char_end=ce, value=spec["value"], kind=spec["kind"], depth=spec["depth"],
            token_start=ts, token_end=te,
        ))
    return Doc(family=family, target_tokens=n_tokens, text=text, facts=facts, n_tokens=len(t_starts))
