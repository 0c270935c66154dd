"""Whether the review's rules find a kind, and the sentence they would cite for it, shared by the
operative-sentence tests."""

from __future__ import annotations

from agentctx.agents.clause_candidates import draw_candidates
from agentctx.retrieval.structure import parse_structure


def kind_found(text: str, kind: str) -> bool:
    """Whether the rules report ``kind`` present in ``text`` (a candidate good enough to cite)."""
    return draw_candidates(parse_structure(text), kind).found


def best_sentence(text: str, kind: str) -> str:
    """The best candidate's text for ``kind`` (whitespace collapsed); fails when none is found."""
    dec = draw_candidates(parse_structure(text), kind)
    assert dec.found, (kind, dec.best)
    return " ".join(text[dec.best.start:dec.best.end].split())
