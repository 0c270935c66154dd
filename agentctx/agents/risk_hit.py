"""What a red-flag rule returns (agentctx/agents/risk_rules.py, risk_law.py), and the sentences it reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentctx.agents.clause_lexicon import normalize

__all__ = ["RuleHit", "sentences"]


@dataclass(frozen=True)
class RuleHit:
    rule: str
    kind: str
    severity: str  # low | medium | high
    start: int | None  # evidence span; None for a rule about something missing
    end: int | None
    rationale: str
    recommendation: str
    facts: dict = field(default_factory=dict)


def sentences(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    return [(s, e, normalize(text[s:e])) for s, e in spans]
