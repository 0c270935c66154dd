"""The document review: summarizer, clause extractor and risk assessor over one shared context.

    structure  (here: the section tree, defined terms and preamble; retrieval.structure)
    summarize  (fan-out: one summarizer task per section of the tree)
    clauses    (fan-out: one extractor task per clause kind of the taxonomy)
    risks      (fan-out over the clauses found, when present: the red-flag rules)
    report     (fan-in: assembled here into a ReviewReport, JSON + HTML)

All agents attend through their own plans over the same prefilled KV; the
replica's prefill counter proves the document was prefilled once. How the review
decides is written up in docs/REVIEW.md.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from pydantic import BaseModel, Field

from agentctx.agents import CLAUSE_KINDS, AgentSpec
from agentctx.agents.clause_candidates import resolve_finding_conflicts
from agentctx.agents.risk_rules import no_liability_cap
from agentctx.agents.section_summary import summary_sections
from agentctx.findings import ClauseFinding, RiskAssessment, RiskFinding, SectionSummary
from pipelines.dsl import Pipeline, PipelineSpec
from pipelines.report_html import render_html
from pipelines.runner import PipelineResult, PipelineRunner
from retrieval.policy import SelectionPolicy
from retrieval.structure import DocumentStructure, structure_of

__all__ = ["review_pipeline", "ReviewReport", "run_review", "build_report"]

log = logging.getLogger(__name__)


def summary_tasks(structure: DocumentStructure) -> list[dict]:
    """One summarizer task per part of the section tree (:func:`summary_sections`)."""
    return [{"section": i, "title": name, "char_start": start, "char_end": end}
            for i, (name, start, end, _) in enumerate(summary_sections(structure))]


def review_pipeline(*, dense: bool = False, policy: SelectionPolicy | None = None,
                    clause_kinds: tuple[str, ...] = CLAUSE_KINDS, summarize: bool = True,
                    max_concurrency: int = 4, sections: list[dict] | None = None) -> PipelineSpec:
    """sections: summarizer tasks from the section tree (:func:`summary_tasks`); None = page groups."""
    p = Pipeline("document_review", "Summary, clause extraction and risk assessment",
                 max_concurrency=max_concurrency)
    common = dict(dense=dense, policy=policy)
    # Summaries are extractive (no model call): one actor runs them all. The other steps get one
    # agent actor per task in flight (num_agents' default).
    # The clause step goes first: its tasks queue ahead of the summaries and call the model.
    clauses = p.step("clauses", AgentSpec(role="clause_extractor", max_new_tokens=80, **common),
                     over=[{"clause": k} for k in clause_kinds])
    if summarize:
        p.step("summarize", AgentSpec(role="summarizer", max_new_tokens=48, **common),
               over=sections if sections is not None else "sections", num_agents=1)
    p.step("risks", AgentSpec(role="risk_assessor", max_new_tokens=64, **common), over=clauses, when="present")
    return p.spec


class ReviewReport(BaseModel):
    document: dict
    sections: list[dict] = Field(default_factory=list, description="The section tree: number, title, level, "
                                                                   "span, parent (retrieval.structure.Section)")
    summary: list[SectionSummary] = Field(default_factory=list)
    clauses: list[ClauseFinding] = Field(default_factory=list)
    risks: list[RiskFinding] = Field(default_factory=list)
    stats: dict = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="What a reader should know about the findings")

    @property
    def verified_share(self) -> float:
        cited = [c for c in self.clauses if c.present]
        return sum(c.verified for c in cited) / len(cited) if cited else 0.0


def severity_note(risks: list[RiskFinding]) -> str | None:
    """A warning when the model rated every risk alike: its severities then rank nothing.

    Seen with the embedded 270M base model, which says "high" for every clause (BENCHMARKS
    §4f); the note is computed from the findings, so a model that discriminates gets none.
    Where the rules set the severity, the note is about the model's secondary severity."""
    sevs = [r.model_severity or r.severity for r in risks]
    if len(risks) < 3 or len(set(sevs)) > 1:
        return None
    sev = sevs[0]
    shares = [r.severity_probs.get(sev) for r in risks if r.severity_probs]
    mean = f"; mean probability of '{sev}' {sum(shares) / len(shares):.2f}" if shares else ""
    if any(r.rule for r in risks):
        return (f"the model rated all {len(risks)} risks '{sev}'{mean}: its severity does not tell them apart on "
                f"this document; the severities shown are the rules'")
    return (f"all {len(risks)} risks were rated '{sev}'{mean}: on this document the model's severity does not "
            f"tell the clauses apart, so treat it as unranked and read each clause")


def _risks(outputs: list[dict]) -> list[RiskFinding]:
    out = []
    for o in outputs:
        if "risks" in o:  # a RiskAssessment: the rules that fired for one clause kind
            out.extend(RiskAssessment.model_validate(o).risks)
        else:
            out.append(RiskFinding.model_validate(o))
    return out


def build_report(result: PipelineResult, document: dict, replica_info: dict, *, text: str | None = None,
                 cite=None, structure: DocumentStructure | None = None) -> ReviewReport:
    """Assemble the report. With ``text`` and ``cite(start, end) -> Citation``, a sentence cited for
    two kinds that it does not both carry is resolved (the weaker kind falls back or is not
    found), and a missing limitation of liability becomes a risk of its own."""
    steps = result.steps
    summary = [SectionSummary.model_validate(o) for o in result.outputs("summarize")] if "summarize" in steps else []
    clauses = [ClauseFinding.model_validate(o) for o in result.outputs("clauses")]
    if text is not None and cite is not None:
        clauses = resolve_finding_conflicts(clauses, text, cite)
    risks = _risks(result.outputs("risks"))
    cap = next((c for c in clauses if c.kind == "liability_cap"), None)
    if cap is not None and not cap.present and not any(r.clause_kind == "liability_cap" for r in risks):
        hit = no_liability_cap(", ".join(cap.searched.get("sections_with_matching_headings", [])[:3]))
        risks.append(RiskFinding(severity=hit.severity, rationale=hit.rationale, recommendation=hit.recommendation,
                                 clause_kind=hit.kind, rule=hit.rule))
    calls = sum(s.stats.get("calls", 0) for s in steps.values())
    attended = sum(s.stats.get("attended_tokens", 0) for s in steps.values())
    context = sum(s.stats.get("context_tokens", 0) for s in steps.values())
    report = ReviewReport(document=document, summary=summary, clauses=clauses, risks=risks,
                          sections=structure.to_dicts() if structure is not None else [],
                          errors=[f"{n}: {e}" for n, s in steps.items() for e in s.errors],
                          notes=[n for n in (severity_note(risks),) if n])
    report.stats = {
        "pipeline_s": round(result.seconds, 2),
        "step_s": {n: round(s.seconds, 2) for n, s in steps.items()},
        "model_calls": calls,
        "effective_context_utilization": round(attended / context, 4) if context else None,
        "clauses_found": sum(c.present for c in clauses),
        "clauses_not_found": [c.kind for c in clauses if not c.present],
        "model_choices": {"asked": sum(c.model_agrees is not None for c in clauses),
                          "agreed_with_rules": sum(c.model_agrees is True for c in clauses),
                          "moved_the_pick": sum(c.chosen_by == "model" for c in clauses)},
        "risks_by_rule": {r.rule: r.severity for r in risks if r.rule},
        "verified_citation_share": round(report.verified_share, 4),
        "prefills_on_replica": replica_info.get("prefills"),
        "replica": {k: replica_info.get(k) for k in ("model_id", "device", "dtype", "kv_bytes_per_token",
                                                     "decode_batching")},
    }
    return report


def run_review(runtime, text: str, *, source: str = "document", tenant: str = "default",
               dense: bool = False, out_dir: str | Path | None = None, progress: bool = True,
               clause_kinds: tuple[str, ...] = CLAUSE_KINDS) -> ReviewReport:
    """Load (or reattach) the document, run the review pipeline, write report.json/.html."""
    from agentctx.agents.review_steps import span_citation

    t0 = time.perf_counter()
    ctx, load = runtime.load_context(text, tenant=tenant)
    try:
        structure = structure_of(text)
        spec = review_pipeline(dense=dense, clause_kinds=clause_kinds,
                               max_concurrency=runtime.config.max_concurrent_agents,
                               sections=summary_tasks(structure))
        result = PipelineRunner(runtime, progress=progress).run(spec, ctx.context_id, tenant)
        document = {"source": source, "context_id": ctx.context_id, "num_tokens": ctx.info.num_tokens,
                    "num_pages": ctx.info.num_pages, "page_size": ctx.info.page_size,
                    "char_spans": ctx.char_spans, "prefill_s": round(load.prefill_s, 2),
                    "index_s": round(load.index_s, 2), "attention": "dense" if dense else "block-selected"}
        report = build_report(result, document, runtime.client.info(), text=text, structure=structure,
                              cite=lambda a, b: span_citation(ctx, a, b))
        report.stats["total_s"] = round(time.perf_counter() - t0, 2)
        if out_dir is not None:
            out = Path(out_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "report.json").write_text(report.model_dump_json(indent=2))
            (out / "report.html").write_text(render_html(report, text))
            log.info("wrote %s and %s", out / "report.json", out / "report.html")
        return report
    finally:
        ctx.close()


def report_summary_line(report: ReviewReport) -> str:
    s = report.stats
    return json.dumps({k: s.get(k) for k in ("total_s", "clauses_found", "verified_citation_share",
                                             "effective_context_utilization", "prefills_on_replica")})
