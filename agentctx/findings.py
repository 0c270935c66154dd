"""Typed outputs of the review agents (pydantic: they are validated, serialised, rendered)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agentctx.citations import Citation

__all__ = ["SectionSummary", "ClauseFinding", "RiskFinding", "RiskAssessment", "Answer", "Severity", "RiskFields",
           "AnswerFields", "SeverityField"]

Severity = Literal["low", "medium", "high"]


class SectionSummary(BaseModel):
    section: int = Field(ge=0)
    document: int | None = Field(None, ge=0, description="The document of a case file it belongs to "
                                                         "(index into the report's documents); None: one document")
    pages: list[int]
    summary: str = Field(description="The section's key sentences, whole, as in the source")
    citation: Citation
    title: str = Field("", description="The section as a reader names it: number and heading")
    key_sentences: list[Citation] = Field(default_factory=list, description="Each sentence of the summary")


class ClauseFinding(BaseModel):
    kind: str
    document: int | None = Field(None, ge=0, description="The document of a case file it belongs to "
                                                         "(index into the report's documents); None: one document")
    present: bool
    quote: str = ""
    citation: Citation | None = None
    utilization: float = Field(0.0, ge=0.0, le=1.0, description="Attended share of the context")
    section: str | None = Field(None, description="Where the quote sits: numbers and headings, outermost first")
    score: float | None = Field(None, description="Evidence score of the chosen candidate (structure + language)")
    threshold: float | None = Field(None, description="Score below which the kind is reported not found")
    chosen_by: str = Field("", description="rules: the best-scored candidate; model: the model's scores moved "
                                           "the pick among close candidates; empty when not found")
    model_agrees: bool | None = Field(None, description="On a close call: whether the model's own pick (its best "
                                                        "option score) is the chosen candidate; None: not asked")
    candidates: list[dict] = Field(default_factory=list, description="The best candidates with their scores "
                                                                     "(and the model's, when it chose)")
    searched: dict = Field(default_factory=dict, description="What was searched: query, sections, pages, sentences")
    note: str = Field("", description="Why the finding is as it is, when that is not obvious")

    @property
    def verified(self) -> bool:
        return self.citation is not None and self.citation.verified


class RiskFields(BaseModel):
    """What the model fills for a risk (constrained: severity is a choice)."""

    severity: Severity
    rationale: str
    recommendation: str


class SeverityField(BaseModel):
    """What the model fills for the secondary severity signal (a scored choice)."""

    severity: Severity


class RiskFinding(RiskFields):
    clause_kind: str
    document: int | None = Field(None, ge=0, description="The document of a case file it belongs to "
                                                         "(index into the report's documents); None: one document")
    citation: Citation | None = None
    severity_probs: dict[str, float] = Field(
        default_factory=dict, description="The model's probability of each severity, normalised over the "
                                          "three options: a secondary signal beside the rule's severity "
                                          "(how clear the model's choice was, not a calibrated risk)")
    rule: str = Field("", description="The red-flag rule that fired; its severity is the finding's severity")
    model_severity: Severity | None = Field(None, description="The model's most likely severity (secondary)")
    other_evidence: list[Citation] = Field(default_factory=list, description="More sentences where the rule fired")
    facts: dict = Field(default_factory=dict, description="What the rule read: notice days, rates, law, venue")


class RiskAssessment(BaseModel):
    """The risk assessor's output for one clause kind: every rule that fired (maybe none)."""

    clause_kind: str
    document: int | None = Field(None, ge=0)
    risks: list[RiskFinding] = Field(default_factory=list)


class AnswerFields(BaseModel):
    answer: str
    quote: str


class QuoteOption(BaseModel):
    """One candidate quote the QA agent weighed: a source span, retrieval's rank, the model's score."""

    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    rank: int = Field(ge=0, description="Retrieval's rank of the page whose evidence this is (0 = best)")
    model_score: float = Field(description="The model's mean log-probability per token of the quote")
    score: float = Field(description="Rank prior plus the model's weighted, standardised score")


class Answer(AnswerFields):
    question: str
    citation: Citation | None = None
    options: list[QuoteOption] = Field(default_factory=list, description="The candidate quotes, best page first")
    chosen_by: str = Field("", description="rules (the operative sentence of the clause kind asked for), "
                                           "retrieval (its first candidate), model (the model's scores moved "
                                           "the pick) or model-written (no candidates: the model wrote the quote)")
