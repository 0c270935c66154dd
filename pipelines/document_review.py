"""The document review: summarizer, clause extractor and risk assessor over one shared context.

    documents  (here: the documents of a case file, each reviewed apart; retrieval.documents)
    structure  (here: each document's section tree, defined terms and preamble; retrieval.structure)
    summarize  (fan-out: one summarizer task per section of each document's tree)
    clauses    (fan-out: one extractor task per clause kind and document)
    risks      (fan-out over the clauses found, when present: the red-flag rules)
    report     (fan-in: assembled in pipelines.report into a ReviewReport, JSON + HTML)

All agents attend through their own plans over the same prefilled KV; the
replica's prefill counter proves the document was prefilled once. How the review
decides is written up in docs/REVIEW.md.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from agentctx.agents import CLAUSE_KINDS, AgentSpec, check_clause_kinds
from agentctx.agents.review_steps import span_citation
from agentctx.agents.section_summary import summary_sections
from agentctx.pipelines.dsl import Pipeline, PipelineSpec
from agentctx.pipelines.report import ReviewReport, build_report
from agentctx.pipelines.report_html import render_html
from agentctx.pipelines.runner import PipelineRunner
from agentctx.retrieval.documents import DocumentPart, document_structure, documents_of, join_documents
from agentctx.retrieval.policy import SelectionPolicy
from agentctx.retrieval.structure import DocumentStructure, structure_of

__all__ = ["review_pipeline", "run_review", "summary_tasks", "case_file_tasks", "section_trees"]

log = logging.getLogger(__name__)


def summary_tasks(structure: DocumentStructure, document: int | None = None) -> list[dict]:
    """One summarizer task per part of the section tree (:func:`summary_sections`)."""
    return [{"section": i, "title": name, "char_start": start, "char_end": end, "document": document}
            for i, (name, start, end, _) in enumerate(summary_sections(structure))]


def section_trees(text: str, parts: list[DocumentPart]) -> list[dict]:
    """The report's section tree: the text's, or for a case file each reviewed document's own tree
    (its ``parent`` indices within that document), each section tagged with its document."""
    if len(parts) == 1:
        return structure_of(text).to_dicts()
    return [dict(d, document=p.index) for p in parts if p.reviewed
            for d in document_structure(text, p).to_dicts()]


def case_file_tasks(text: str) -> tuple[list[DocumentPart], list[int | None], list[dict]]:
    """The documents of ``text``, the ``document`` value of each one's tasks (None when the text
    is one document, so a single agreement reviews as before) and the summary tasks of all."""
    parts = list(documents_of(text))
    if len(parts) == 1:
        return parts, [None], summary_tasks(document_structure(text, None))
    ids: list[int | None] = [p.index for p in parts if p.reviewed]  # "other" text between documents is not
    sections = [t for d in ids for t in summary_tasks(document_structure(text, parts[d]), d)]
    return parts, ids, sections


def review_pipeline(*, dense: bool = False, policy: SelectionPolicy | None = None,
                    clause_kinds: tuple[str, ...] = CLAUSE_KINDS, summarize: bool = True,
                    max_concurrency: int = 4, sections: list[dict] | None = None,
                    documents: list[int | None] | None = None) -> PipelineSpec:
    """sections: summarizer tasks from the section tree (:func:`summary_tasks`); None = page groups.
    documents: the ``document`` of each set of clause tasks (:func:`case_file_tasks`); None = [None],
    the whole text as one document."""
    clause_kinds = check_clause_kinds(clause_kinds)
    p = Pipeline("document_review", "Summary, clause extraction and risk assessment",
                 max_concurrency=max_concurrency)
    common = dict(dense=dense, policy=policy)
    # Summaries are extractive (no model call): one actor runs them all. The other steps get one
    # agent actor per task in flight (num_agents' default).
    # The clause step goes first: its tasks queue ahead of the summaries and call the model.
    clauses = p.step("clauses", AgentSpec(role="clause_extractor", max_new_tokens=80, **common),
                     over=[{"clause": k, "document": d} for d in (documents or [None]) for k in clause_kinds])
    if summarize:
        p.step("summarize", AgentSpec(role="summarizer", max_new_tokens=48, **common),
               over=sections if sections is not None else "sections", num_agents=1)
    p.step("risks", AgentSpec(role="risk_assessor", max_new_tokens=64, **common), over=clauses, when="present")
    return p.spec


def run_review(runtime, text: str | list[tuple[str, str]], *, source: str = "document", tenant: str = "default",
               dense: bool = False, out_dir: str | Path | None = None, progress: bool = True,
               clause_kinds: tuple[str, ...] = CLAUSE_KINDS) -> ReviewReport:
    """Load (or reattach) the document, run the review pipeline, write report.json/.html.

    ``text``: one document (a case file is split into its documents: retrieval.documents), or
    several ``(name, text)`` documents, joined into one context with a header line each."""
    t0 = time.perf_counter()
    if not isinstance(text, str):
        if len(text) > 1:
            source = ", ".join(name for name, _ in text)
        text = join_documents(text) if len(text) > 1 else text[0][1]
    ctx, load = runtime.load_context(text, tenant=tenant, progress=progress)
    try:
        parts, ids, sections = case_file_tasks(text)
        if len(parts) > 1:
            log.info("%d documents: %s", len(parts), "; ".join(p.name for p in parts))
        spec = review_pipeline(dense=dense, clause_kinds=clause_kinds,
                               max_concurrency=runtime.config.max_concurrent_agents,
                               sections=sections, documents=ids)
        result = PipelineRunner(runtime, progress=progress).run(spec, ctx.context_id, tenant)
        report = build_report(result, runtime.client.info(), text=text, sections=section_trees(text, parts),
                              documents=parts if len(parts) > 1 else None,
                              cite=lambda a, b: span_citation(ctx, a, b), source=source,
                              char_spans=ctx.char_spans, prefill_s=round(load.prefill_s, 2),
                              index_s=round(load.index_s, 2), attention="dense" if dense else "block-selected")
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
