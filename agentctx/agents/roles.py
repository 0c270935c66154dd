"""Built-in roles: summarizer, clause extractor, risk assessor, question answering.

Prompts are completion-style because the embedded model is a small base model:
each prompt continues right after the shared document. Leaf values come from
constrained fill (agentctx.structured), and every quote is checked against the
source (agentctx.citations).
"""

from __future__ import annotations

import re

from agentctx.agents.answering import answer_question, cite
from agentctx.agents.base import Agent, AgentTask, register_role
from agentctx.agents.review_steps import assess_risks, extract_clause, summarize_section
from agentctx.context import Context
from agentctx.findings import Answer, ClauseFinding, RiskAssessment, SectionSummary
from agentctx.retrieval.policy import AttendPlan

__all__ = ["Summarizer", "ClauseExtractor", "RiskAssessor", "QuestionAnswerer", "cite"]


def _quote_source(plan: AttendPlan, max_pages: int = 4) -> list[int]:
    """Best-ranked attended pages (a sink page counts when retrieval ranked it too)."""
    if plan.retrieval is not None:
        ranked = [int(p) for p in plan.retrieval.pages if int(p) in plan.pages]
        if ranked:
            return ranked[:max_pages]
    return list(plan.pages_with("retrieved") + plan.pages_with("neighbor")) or list(plan.pages)


def clause_candidate_pages(plan: AttendPlan) -> list[int]:
    """Pages whose sentences a clause quote is picked from: the best-ranked retrieved pages plus
    the always-attended sink pages. A contract's first page (its parties, often its preamble) is
    a sink page that page-level retrieval rarely ranks: on 12 synthetic contracts the parties
    clause had no correct candidate in 9 without it and 0 with it (bench/experiments/clause_pick.py)."""
    return sorted(set(_quote_source(plan)) | set(plan.pages_with("sink")))


@register_role
class Summarizer(Agent):
    """The key obligations of a section (or a group of pages), as whole source sentences chosen
    by centrality (:mod:`.section_summary`); the model is not asked."""

    role = "summarizer"
    output_schema = SectionSummary

    def run(self, ctx: Context, task: AgentTask) -> SectionSummary:
        return summarize_section(self, ctx, task)


_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(])|\n+")
_CLAUSE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|\([a-z0-9]+\))\s+")


def candidate_sentences(ctx: Context, pages: list[int], min_chars: int = 24) -> list[tuple[int, int]]:
    """Char spans of the sentences (or lines) of the given pages, clause numbers stripped.

    The previous extractor's candidates (line-based); kept for bench/experiments/clause_pick.py, which
    measures page-level candidate sources on synthetic contracts."""
    spans = []
    for p in sorted(set(pages)):
        start, end = ctx.char_spans[p]
        chunk = ctx.text[start:end]
        pos = 0
        for m in list(_SENTENCE_END.finditer(chunk)) + [None]:
            stop = m.start() if m else len(chunk)
            piece = chunk[pos:stop]
            lead = _CLAUSE_NUMBER.match(piece)
            s = start + pos + (lead.end() if lead else 0)
            e = start + stop
            text = ctx.text[s:e].strip()
            if len(text) >= min_chars and not text.isupper():
                s += len(ctx.text[s:e]) - len(ctx.text[s:e].lstrip())
                spans.append((s, s + len(text)))
            pos = m.end() if m else len(chunk)
    return list(dict.fromkeys(spans))


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
