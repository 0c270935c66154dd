"""Built-in roles: summarizer, clause extractor, risk assessor, question answering.

Prompts are completion-style because the embedded model is a small base model:
each prompt continues right after the shared document. Leaf values come from
constrained fill (agentctx.structured), and every quote is checked against the
source (agentctx.citations).
"""

from __future__ import annotations

from agentctx.agents.answering import answer_question, cite
from agentctx.agents.base import Agent, AgentTask, register_role
from agentctx.agents.review_steps import assess_risks, extract_clause, summarize_section
from agentctx.context import Context
from agentctx.findings import Answer, ClauseFinding, RiskAssessment, SectionSummary

__all__ = ["Summarizer", "ClauseExtractor", "RiskAssessor", "QuestionAnswerer", "cite"]


@register_role
class Summarizer(Agent):
    """The key obligations of a section (or a group of pages), as whole source sentences chosen
    by centrality (:mod:`.section_summary`); the model is not asked."""

    role = "summarizer"
    output_schema = SectionSummary

    def run(self, ctx: Context, task: AgentTask) -> SectionSummary:
        return summarize_section(self, ctx, task)


@register_role
class ClauseExtractor(Agent):
    """Quote the operative sentence(s) of a clause kind, or report it not found.

    Candidates come from the document's structure and language, nudged by retrieval;
    the model chooses among the few that score alike (:func:`.review_steps.extract_clause`).
    The quote is source text and its citation a span of it.
    """

    role = "clause_extractor"
    output_schema = ClauseFinding

    def run(self, ctx: Context, task: AgentTask) -> ClauseFinding:
        return extract_clause(self, ctx, task)


@register_role
class RiskAssessor(Agent):
    """Red-flag rules over one clause kind's sections, each hit with its evidence span; the
    model's severity probabilities ride beside the rule's severity (:mod:`.risk_rules`)."""

    role = "risk_assessor"
    output_schema = RiskAssessment

    def run(self, ctx: Context, task: AgentTask) -> RiskAssessment:
        return assess_risks(self, ctx, task)


@register_role
class QuestionAnswerer(Agent):
    """A short answer with a quote chosen among retrieval's evidence sentences by the model
    (:func:`.answering.answer_question`); the quote is source text and its citation a span of it."""

    role = "qa"
    output_schema = Answer

    def run(self, ctx: Context, task: AgentTask) -> Answer:
        return answer_question(self, ctx, task)
