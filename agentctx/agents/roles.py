"""Built-in roles: summarizer, clause extractor, risk assessor, question answering.

Prompts are completion-style because the embedded model is a small base model:
each prompt continues right after the shared document. Leaf values come from
constrained fill (agentctx.structured), and every quote is checked against the
source (agentctx.citations).
"""

from __future__ import annotations

import re

from agentctx.agents.base import Agent, AgentTask, register_role
from agentctx.agents.taxonomy import CLAUSE_TAXONOMY, ClauseKind
from agentctx.citations import Citation, locate_quote
from agentctx.context import Context
from agentctx.findings import Answer, AnswerFields, ClauseFinding, RiskFields, RiskFinding, SectionSummary
from agentctx.retrieval.policy import AttendPlan
from agentctx.structured import fill_fields

__all__ = ["Summarizer", "ClauseExtractor", "RiskAssessor", "QuestionAnswerer", "cite"]


def cite(ctx: Context, quote: str, plan: AttendPlan | None) -> Citation | None:
    """Locate a quote, preferring the attended pages; None for an empty quote."""
    hint_start, hint_end = 0, None
    if plan is not None:
        spans = [ctx.char_spans[p] for p in plan.pages if plan.reason_of(p) in ("retrieved", "neighbor")]
        if spans:
            hint_start, hint_end = min(s for s, _ in spans), max(e for _, e in spans)
    found = locate_quote(ctx.text, quote, hint_start, hint_end)
    if found is None:
        return None
    start, end, verified = found
    page = ctx.page_of_char(start)
    return Citation(page=page, page_id=ctx.page_ids[page], char_start=start, char_end=end,
                    quote=ctx.text[start:end] if verified else quote.strip(), verified=verified)


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
    clause had no correct candidate in 9 without it and 0 with it (bench/clause_pick.py)."""
    return sorted(set(_quote_source(plan)) | set(plan.pages_with("sink")))


def clause_question(kind: ClauseKind) -> str:
    """The extractor's task text for a clause kind; each candidate sentence is scored as its answer."""
    return f'Question: Quote the sentence of the document that {kind.description}.\nAnswer: "'


def _snippet(text: str, n: int = 80) -> str:
    s = " ".join(text.split())[:n]
    return s.rsplit(" ", 1)[0] if " " in s else s


@register_role
class Summarizer(Agent):
    role = "summarizer"
    output_schema = SectionSummary

    def run(self, ctx: Context, task: AgentTask) -> SectionSummary:
        pages = [int(p) for p in task.need("pages", self.role)]
        plan = None if self.spec.dense else ctx.pages_plan(pages, self.spec.policy)
        start, end = ctx.char_spans[pages[0]][0], ctx.char_spans[pages[-1]][1]
        body = (f'Question: In one sentence, what does the part of the document beginning "'
                f'{_snippet(ctx.text[start:end])}" say?\nAnswer:')
        summary = self.llm(ctx, plan).complete(self.prompt(body), max_new_tokens=self.spec.max_new_tokens,
                                               stop=("\n",)).strip()
        page = pages[0]
        return SectionSummary(
            section=task.section, pages=pages, summary=summary,
            citation=Citation(page=page, page_id=ctx.page_ids[page], char_start=start, char_end=end,
                              quote=_snippet(ctx.text[start:end], 160), verified=True),
        )


_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(])|\n+")
_CLAUSE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|\([a-z0-9]+\))\s+")


def candidate_sentences(ctx: Context, pages: list[int], min_chars: int = 24) -> list[tuple[int, int]]:
    """Char spans of the sentences (or lines) of the given pages, clause numbers stripped."""
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
    """Quote the sentence that carries a clause kind.

    Candidates are the sentences of the best-ranked retrieved pages and the sink pages
    (:func:`clause_candidate_pages`); the embedding model shortlists them and the LLM,
    attending to the planned pages, picks the one it finds most likely as the answer
    (length-normalised log-likelihood). The quote is therefore source text, and its
    citation is verified against the source.
    """

    role = "clause_extractor"
    output_schema = ClauseFinding
    shortlist = 4

    def run(self, ctx: Context, task: AgentTask) -> ClauseFinding:
        kind = CLAUSE_TAXONOMY[task.need("clause", self.role)]
        ranking = ctx.plan(kind.query, self.spec.policy)  # candidates come from retrieval in both modes
        plan = None if self.spec.dense else ranking
        util = plan.utilization if plan is not None else 1.0
        spans = candidate_sentences(ctx, clause_candidate_pages(ranking))
        if not spans:
            return ClauseFinding(kind=kind.kind, present=False, utilization=util)
        texts = [ctx.text[s:e] for s, e in spans]
        sims = ctx.rank_texts(kind.query + " " + kind.description, texts)
        top = sorted(range(len(texts)), key=lambda i: -sims[i])[: self.shortlist]
        pick = top[self.llm(ctx, plan).choose(self.prompt(clause_question(kind)), [texts[i] + '"' for i in top],
                                              per_token=True)]
        citation = cite(ctx, texts[pick], plan)
        return ClauseFinding(kind=kind.kind, present=citation is not None, quote=texts[pick],
                             citation=citation, utilization=util)


def risk_prompt(kind: str, quote: str) -> str:
    """The risk assessor's task text for one clause; its JSON fields follow it. The one place
    for it: bench/risk_calibration.py and bench/risk_rationale.py score this same text."""
    return f'Clause ({kind}): "{quote}"\nRisk review of this clause for the Customer, as JSON:\n'


@register_role
class RiskAssessor(Agent):
    role = "risk_assessor"
    output_schema = RiskFinding

    def run(self, ctx: Context, task: AgentTask) -> RiskFinding:
        clause = ClauseFinding.model_validate(task.need("input", self.role))
        quote = clause.citation.quote if clause.citation else clause.quote
        plan = self.plan(ctx, quote or clause.kind)
        body = risk_prompt(clause.kind.replace("_", " "), quote)
        probs: dict[str, dict[str, float]] = {}
        fields = fill_fields(self.llm(ctx, plan), self.prompt(body), RiskFields,
                             max_chars={"rationale": 240, "recommendation": 240},
                             max_attempts=self.spec.max_attempts, choice_probs=probs)
        return RiskFinding(**fields.model_dump(), clause_kind=clause.kind, citation=clause.citation,
                           severity_probs=probs.get("severity", {}))


@register_role
class QuestionAnswerer(Agent):
    role = "qa"
    output_schema = Answer

    def run(self, ctx: Context, task: AgentTask) -> Answer:
        question = str(task.need("question", self.role)).strip()
        if not question:
            raise ValueError("qa task has an empty question")
        plan = self.plan(ctx, question)
        body = f"Question: {question}\nAnswer as JSON with the answer and a word-for-word quote from the document:\n"
        fields = fill_fields(self.llm(ctx, plan), self.prompt(body), AnswerFields,
                             max_chars={"answer": 300, "quote": 400}, max_attempts=self.spec.max_attempts)
        return Answer(**fields.model_dump(), question=question, citation=cite(ctx, fields.quote, plan))
