"""The document review: summarizer, clause extractor and risk assessor over one shared context.

    summarize  (fan-out: one summarizer task per section)
    clauses    (fan-out: one extractor task per clause kind of the taxonomy)
    risks      (fan-out over the clauses found, when present)
    report     (fan-in: assembled here into a ReviewReport, JSON + HTML)

All agents attend through their own plans over the same prefilled KV; the
replica's prefill counter proves the document was prefilled once.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from pydantic import BaseModel, Field

from agentctx.agents import CLAUSE_KINDS, AgentSpec
from agentctx.findings import ClauseFinding, RiskFinding, SectionSummary
from agentctx.pipelines.dsl import Pipeline, PipelineSpec
from agentctx.pipelines.report_html import render_html
from agentctx.pipelines.runner import PipelineResult, PipelineRunner
from agentctx.retrieval.policy import SelectionPolicy

__all__ = ["review_pipeline", "ReviewReport", "run_review", "build_report"]

log = logging.getLogger(__name__)


def review_pipeline(*, dense: bool = False, policy: SelectionPolicy | None = None,
                    clause_kinds: tuple[str, ...] = CLAUSE_KINDS, summarize: bool = True,
                    max_concurrency: int = 4) -> PipelineSpec:
    p = Pipeline("document_review", "Summary, clause extraction and risk assessment",
                 max_concurrency=max_concurrency)
    common = dict(dense=dense, policy=policy)
    # Steps get one agent actor per task in flight (num_agents' default): an actor runs its tasks
    # one after another, and the replica batches the decode steps of concurrent generations.
    if summarize:
        p.step("summarize", AgentSpec(role="summarizer", max_new_tokens=48, **common), over="sections")
    clauses = p.step("clauses", AgentSpec(role="clause_extractor", max_new_tokens=80, **common),
                     over=[{"clause": k} for k in clause_kinds])
    p.step("risks", AgentSpec(role="risk_assessor", max_new_tokens=64, **common), over=clauses, when="present")
    return p.spec


class ReviewReport(BaseModel):
    document: dict
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
    """A warning when the model rated every clause alike: its severities then rank nothing.

    Seen with the embedded 270M base model, which says "high" for every clause (BENCHMARKS
    §4f); the note is computed from the findings, so a model that discriminates gets none."""
    if len(risks) < 3 or len({r.severity for r in risks}) > 1:
        return None
    sev = risks[0].severity
    shares = [r.severity_probs.get(sev) for r in risks if r.severity_probs]
    mean = f"; mean probability of '{sev}' {sum(shares) / len(shares):.2f}" if shares else ""
    return (f"all {len(risks)} risks were rated '{sev}'{mean}: on this document the model's severity does not "
            f"tell the clauses apart, so treat it as unranked and read each clause")


def build_report(result: PipelineResult, document: dict, replica_info: dict) -> ReviewReport:
    steps = result.steps
    summary = [SectionSummary.model_validate(o) for o in result.outputs("summarize")] if "summarize" in steps else []
    clauses = [ClauseFinding.model_validate(o) for o in result.outputs("clauses")]
    risks = [RiskFinding.model_validate(o) for o in result.outputs("risks")]
    calls = sum(s.stats.get("calls", 0) for s in steps.values())
    attended = sum(s.stats.get("attended_tokens", 0) for s in steps.values())
    context = sum(s.stats.get("context_tokens", 0) for s in steps.values())
    report = ReviewReport(document=document, summary=summary, clauses=clauses, risks=risks,
                          errors=[f"{n}: {e}" for n, s in steps.items() for e in s.errors],
                          notes=[n for n in (severity_note(risks),) if n])
    report.stats = {
        "pipeline_s": round(result.seconds, 2),
        "step_s": {n: round(s.seconds, 2) for n, s in steps.items()},
        "model_calls": calls,
        "effective_context_utilization": round(attended / context, 4) if context else None,
        "clauses_found": sum(c.present for c in clauses),
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
    t0 = time.perf_counter()
    ctx, load = runtime.load_context(text, tenant=tenant)
    try:
        spec = review_pipeline(dense=dense, clause_kinds=clause_kinds,
                               max_concurrency=runtime.config.max_concurrent_agents)
        result = PipelineRunner(runtime, progress=progress).run(spec, ctx.context_id, tenant)
        document = {"source": source, "context_id": ctx.context_id, "num_tokens": ctx.info.num_tokens,
                    "num_pages": ctx.info.num_pages, "page_size": ctx.info.page_size,
                    "char_spans": ctx.char_spans, "prefill_s": round(load.prefill_s, 2),
                    "index_s": round(load.index_s, 2), "attention": "dense" if dense else "block-selected"}
        report = build_report(result, document, runtime.client.info())
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
