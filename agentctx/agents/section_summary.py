"""Extractive section summaries: the key obligations of a section, as whole source sentences.

A summary that says something names what the section obliges or permits. Here it is
chosen, not generated: the section's sentences (never its heading or clause number)
are scored by **centrality**, the cosine of each sentence's content words to the
section's word centroid, plus a bonus for the language of obligation ("shall",
"must", "may not", "agrees to", "is liable"); the best ``max_sentences`` are kept in
document order. The small model is not used: its generated summaries were a heading
("1.1.") or the first sentence (issue 20), and centrality needs no prefill.

:func:`summary_sections` picks the sections to summarise: the preamble, then, walking
the tree from the top, each section none of whose descendants has a title of its own
(an article with untitled "3.1", "3.2" items is one summary; a "GENERAL" section whose
items are titled gets one summary per item).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from agentctx.agents.clause_lexicon import normalize
from agentctx.retrieval.structure import DocumentStructure, Section

__all__ = ["summary_sections", "key_sentences", "OBLIGATION"]

OBLIGATION = re.compile(r"\b(?:shall|must|will|may\s+not|may|agrees?\s+to|"
                        r"is\s+(?:not\s+)?liable|are\s+(?:not\s+)?liable|"
                        r"(?:is|are)\s+(?:required|entitled|permitted|prohibited)|undertakes?|grants?|warrants?)\b",
                        re.I)
_STOP = frozenset("""a an the and or of to in on for by with from at as is are be been being this that these those
    it its their his her any all each either other such no not than then there here which who whom whose shall will
    may must can would should under upon into out over within without only also so if unless until after before
    party parties agreement""".split())
_WORD = re.compile(r"[a-z][a-z'-]+")


def _words(s: str) -> Counter:
    return Counter(w[:7] for w in _WORD.findall(s.lower()) if w not in _STOP and len(w) > 2)


def _cos(a: Counter, b: Counter) -> float:
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def key_sentences(st: DocumentStructure, start: int, end: int, max_sentences: int = 2,
                  max_chars: int = 700) -> list[tuple[int, int]]:
    """The central obligation sentences of ``text[start:end]``, in document order."""
    units = [u for u in st.units_in(start, end)]
    if not units:
        return []
    texts = [normalize(st.text[u.start:u.end]) for u in units]
    bags = [_words(t) for t in texts]
    centroid: Counter = Counter()
    for b in bags:
        centroid.update({k: 1 for k in b})  # document frequency inside the section
    scored = []
    for i, (u, t, b) in enumerate(zip(units, texts, bags)):
        n_words = len(t.split())
        score = _cos(b, centroid)
        if OBLIGATION.search(t):
            score += 0.5
        if n_words < 6:
            score -= 0.5  # a fragment or a label ("Term.") says little
        if re.search(r"\bmeans?\b|\brefers?\s+to\b", t) and i == 0 and len(units) > 1:
            score -= 0.2  # a definition opening a section is less an obligation than what follows
        scored.append((score, -u.start, u))
    scored.sort(reverse=True)
    chosen, total = [], 0
    for _, _, u in scored:
        n = u.end - u.start
        if chosen and total + n > max_chars:
            continue
        chosen.append(u)
        total += n
        if len(chosen) >= max_sentences:
            break
    return sorted((u.start, u.end) for u in chosen)


def summary_sections(st: DocumentStructure) -> list[tuple[str, int, int, Section | None]]:
    """(name, start, end, section) of each part to summarise, in document order."""
    out: list[tuple[str, int, int, Section | None]] = []
    if st.preamble is not None:
        out.append(("Preamble", st.preamble[0], st.preamble[1], None))
    titled_below: dict[int, bool] = {}
    for s in reversed(st.sections):  # children come after their parents
        has = any(titled_below.get(c.index, False) or bool(c.title) for c in st.children(s.index))
        titled_below[s.index] = has

    def walk(parent: int | None) -> None:
        for s in st.children(parent):
            if titled_below[s.index]:
                first_child = st.children(s.index)[0].start
                own = st.units_in(s.start, first_child)
                if st.preamble is not None and own and st.preamble[0] <= own[0].start \
                        and own[-1].end <= st.preamble[1]:
                    own = []  # the preamble under the document's title heading, summarised as "Preamble"
                if own:  # its own text before its titled parts
                    out.append((s.name, s.start, first_child, s))
                walk(s.index)
            elif st.units_in(s.start, s.end):
                out.append((s.name, s.start, s.end, s))

    walk(None)
    return out
