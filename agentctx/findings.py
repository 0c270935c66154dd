"""Typed outputs of the review agents (pydantic: they are validated, serialised, rendered)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agentctx.citations import Citation

__all__ = ["SectionSummary", "ClauseFinding", "RiskFinding", "Answer", "Severity", "RiskFields", "AnswerFields"]

Severity = Literal["low", "medium", "high"]


class SectionSummary(BaseModel):
    section: int = Field(ge=0)
    pages: list[int]
    summary: str
    citation: Citation


class ClauseFinding(BaseModel):
    kind: str
    present: bool
    quote: str = ""
    citation: Citation | None = None
    utilization: float = Field(0.0, ge=0.0, le=1.0, description="Attended share of the context")

    @property
    def verified(self) -> bool:
        return self.citation is not None and self.citation.verified


class RiskFields(BaseModel):
    """What the model fills for a risk (constrained: severity is a choice)."""

    severity: Severity
    rationale: str
    recommendation: str


class RiskFinding(RiskFields):
    clause_kind: str
    citation: Citation | None = None
    severity_probs: dict[str, float] = Field(
        default_factory=dict, description="The model's probability of each severity, normalised over the "
                                          "three options: how clear its choice was (not a calibrated risk)")


class AnswerFields(BaseModel):
    answer: str
    quote: str


class Answer(AnswerFields):
    question: str
    citation: Citation | None = None
