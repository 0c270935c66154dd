"""The review report: typed findings, run statistics and notes for a reader (JSON; HTML in report_html)."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field, model_serializer

from agentctx.agents.clause_candidates import resolve_finding_conflicts
from agentctx.agents.risk_law import law_named
from agentctx.agents.risk_rules import no_liability_cap
from agentctx.context import ContextInfo
from agentctx.findings import ClauseFinding, RiskAssessment, RiskFinding, SectionSummary
from agentctx.pipelines.runner import PipelineResult
from agentctx.retrieval.documents import DocumentPart
from agentctx.retrieval.structure import DocumentStructure

__all__ = ["ReviewDocument", "CaseDocument", "ReviewReport", "build_report", "severity_note", "report_summary_line",
           "cross_document_notes"]


class ReviewDocument(BaseModel):
    """What a review report says about its document. Fields left unset are left out of the JSON."""

    source: str | None = Field(None, description="File name the document came from")
    context_id: str
    num_tokens: int
    num_pages: int
    page_size: int | None
    char_spans: list[tuple[int, int]] | None = Field(None, description="Character span of each page")
    prefill_s: float | None = None
    index_s: float | None = None
    attention: str | None = Field(None, description="dense or block-selected")

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    @classmethod
    def of(cls, info: ContextInfo, **details) -> "ReviewDocument":
        return cls(context_id=info.context_id, num_tokens=info.num_tokens, num_pages=info.num_pages,
                   page_size=info.page_size, **details)


class CaseDocument(BaseModel):
    """One document of a case file, as the review found it (retrieval.documents)."""

    index: int = Field(ge=0)
    name: str = Field(description="Its title, or the file name it was loaded from")
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    how: str = Field(description="How its start was found: header (a file of a joined upload), opening "
                                 "(its title or preamble), whole")
    clauses_found: int = 0
    clauses_not_found: list[str] = Field(default_factory=list)
    risks: int = 0


class ReviewReport(BaseModel):
    document: ReviewDocument
    documents: list[CaseDocument] = Field(default_factory=list, description="A case file's documents, each "
                                          "reviewed apart (findings carry its index); empty for one document")
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
    rated = [r for r in risks if r.model_severity] or risks  # rules without evidence get no model severity
    sevs = [r.model_severity or r.severity for r in rated]
    if len(rated) < 3 or len(set(sevs)) > 1:
        return None
    sev, risks = sevs[0], rated
    shares = [r.severity_probs.get(sev) for r in risks if r.severity_probs]
    mean = f"; mean probability of '{sev}' {sum(shares) / len(shares):.2f}" if shares else ""
    if any(r.rule for r in risks):
        return (f"the model rated all {len(risks)} risks '{sev}'{mean}: its severity does not tell them apart on "
                f"this document; the severities shown are the rules'")
    return (f"all {len(risks)} risks were rated '{sev}'{mean}: on this document the model's severity does not "
            f"tell the clauses apart, so treat it as unranked and read each clause")


def cross_document_notes(documents: list[CaseDocument], clauses: list[ClauseFinding]) -> list[str]:
    """What a reader of a case file should see across its documents: different governing laws,
    and the kinds some documents have and others lack."""
    reviewed = [d for d in documents if d.how != "other"]
    if len(reviewed) < 2:
        return []
    notes = []
    laws: dict[str, list[str]] = {}
    for c in clauses:
        if c.kind == "governing_law" and c.present and c.document is not None:
            law = law_named(c.quote)
            # "the laws of the State of Governing Law" names a term a cover page fills in, not a law
            if law and not re.search(r"\blaw\b", law, re.I):
                laws.setdefault(law, []).append(documents[c.document].name)
    if len(laws) > 1:
        notes.append("the documents are governed by different laws: " + "; ".join(
            f"{law} ({', '.join(names)})" for law, names in laws.items()))
    for kind in ("liability_cap", "governing_law", "termination"):
        lacking = [documents[c.document].name for c in clauses
                   if c.kind == kind and not c.present and c.document is not None]
        having = [c for c in clauses if c.kind == kind and c.present and c.document is not None]
        if lacking and having:
            notes.append(f"{kind.replace('_', ' ')} found in {len(having)} of {len(reviewed)} documents; "
                         f"not in: {', '.join(lacking)}")
    return notes


def _risks(outputs: list[dict]) -> list[RiskFinding]:
    out = []
    for o in outputs:
        if "risks" in o:  # a RiskAssessment: the rules that fired for one clause kind
            out.extend(RiskAssessment.model_validate(o).risks)
        else:
            out.append(RiskFinding.model_validate(o))
    return out


def _by_document(items: list, document: int | None) -> list:
    return [x for x in items if x.document == document]


def build_report(result: PipelineResult, replica_info: dict, *, text: str | None = None, cite=None,
                 structure: DocumentStructure | None = None, documents: list[DocumentPart] | None = None,
                 sections: list[dict] | None = None, **document) -> ReviewReport:
    """The report of a review pipeline's result; ``document``: details beyond the context's own
    (see :class:`ReviewDocument`); ``documents``: a case file's documents (findings carry their
    index); ``sections``: the section tree(s) as dicts, else ``structure``'s. With ``text`` and
    ``cite(start, end) -> Citation``, a sentence cited for two kinds that
    it does not both carry is resolved (the weaker kind falls back or is not found), and a missing
    limitation of liability becomes a risk of its own, each within its document."""
    steps = result.steps
    summary = [SectionSummary.model_validate(o) for o in result.outputs("summarize")] if "summarize" in steps else []
    clauses = [ClauseFinding.model_validate(o) for o in result.outputs("clauses")]
    doc_ids = sorted({c.document for c in clauses}, key=lambda d: -1 if d is None else d)
    if text is not None and cite is not None:
        clauses = [c for d in doc_ids for c in resolve_finding_conflicts(_by_document(clauses, d), text, cite)]
    risks = _risks(result.outputs("risks"))
    for d in doc_ids:
        cap = next((c for c in _by_document(clauses, d) if c.kind == "liability_cap"), None)
        if cap is not None and not cap.present and not any(r.clause_kind == "liability_cap"
                                                           for r in _by_document(risks, d)):
            hit = no_liability_cap(", ".join(cap.searched.get("sections_with_matching_headings", [])[:3]))
            risks.append(RiskFinding(severity=hit.severity, rationale=hit.rationale,
                                     recommendation=hit.recommendation, clause_kind=hit.kind, rule=hit.rule,
                                     document=d))
    risks.sort(key=lambda r: -1 if r.document is None else r.document)  # stable: each document's own order
    cases = [CaseDocument(index=p.index, name=p.name, char_start=p.start, char_end=p.end, how=p.how,
                          clauses_found=sum(c.present for c in _by_document(clauses, p.index)),
                          clauses_not_found=[c.kind for c in _by_document(clauses, p.index) if not c.present],
                          risks=len(_by_document(risks, p.index)))
             for p in documents or []]
    calls = sum(s.stats.get("calls", 0) for s in steps.values())
    attended = sum(s.stats.get("attended_tokens", 0) for s in steps.values())
    context = sum(s.stats.get("context_tokens", 0) for s in steps.values())
    report = ReviewReport(document=ReviewDocument.of(result.context, **document), summary=summary, clauses=clauses,
                          risks=risks, sections=sections if sections is not None else
                          structure.to_dicts() if structure is not None else [],
                          errors=[f"{n}: {e}" for n, s in steps.items() for e in s.errors], documents=cases,
                          notes=[n for n in (severity_note(risks),) if n] + cross_document_notes(cases, clauses))
    report.stats = {
        "pipeline_s": round(result.seconds, 2),
        "step_s": {n: round(s.seconds, 2) for n, s in steps.items()},
        "model_calls": calls,
        "effective_context_utilization": round(attended / context, 4) if context else None,
        "clauses_found": sum(c.present for c in clauses),
        "clauses_not_found": [c.kind if c.document is None or not cases else f"{c.kind} ({cases[c.document].name})"
                              for c in clauses if not c.present],
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


def report_summary_line(report: ReviewReport) -> str:
    s = report.stats
    return json.dumps({k: s.get(k) for k in ("total_s", "clauses_found", "verified_citation_share",
                                             "effective_context_utilization", "prefills_on_replica")})
