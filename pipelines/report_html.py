"""A readable HTML page of a review: findings link to highlighted spans of the source.

Every cited span (clause quotes, risk evidence, summary sentences) is highlighted in the
source pane and carries its own anchor on its first highlighted character, so a link
always lands on the text it cites, even when two findings cite overlapping text. Kinds
that were not found say so, with what was searched. The run statistics are a table.
"""

from __future__ import annotations

import html
from typing import Any

from agentctx.pipelines.report import ReviewReport

__all__ = ["render_html", "cited_spans"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:0;display:flex;height:100vh}
#findings{width:44%;overflow:auto;padding:1em;border-right:1px solid #ccc;box-sizing:border-box}
#source{flex:1;overflow:auto;padding:1em;white-space:pre-wrap;font-family:Georgia,serif;line-height:1.5}
mark{background:#fff08a} mark.risk{background:#ffc38a} mark.summary{background:none;border-bottom:2px dotted #7aa7e0}
mark.unverified{background:#ffd0d0} mark:target{background:#ffb300;outline:2px solid #b36b00}
.sev-high{color:#b00020;font-weight:bold}.sev-medium{color:#b36b00}.sev-low{color:#2e7d32}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em .8em;margin:.5em 0}
.card.absent{background:#f6f6f6} .card.risk{border-left:4px solid #ffc38a} .card.note{background:#fffbe6}
.muted{color:#777;font-size:.9em} table{border-collapse:collapse} td,th{padding:2px 8px;vertical-align:top;
text-align:left} table.run td,table.docs td{border-bottom:1px solid #eee} code{font-size:.85em}
section{border-top:2px solid #ccc;margin-top:1em} .key mark{padding:0 .3em}
@media (max-width:800px){body{display:block;height:auto}#findings{width:100%;border-right:none}
#source{border-top:2px solid #ccc}}
"""


def cited_spans(report: ReviewReport) -> list[tuple[int, int, str, str]]:
    """(start, end, anchor id, css class) of every span the report cites, non-empty only."""
    spans = []
    for i, c in enumerate(report.clauses):
        if c.present and c.citation is not None:
            spans.append((c.citation.char_start, c.citation.char_end, f"clause-{i}",
                          "" if c.citation.verified else "unverified"))
    for i, r in enumerate(report.risks):
        if r.citation is not None:
            spans.append((r.citation.char_start, r.citation.char_end, f"risk-{i}", "risk"))
        for j, o in enumerate(r.other_evidence):
            spans.append((o.char_start, o.char_end, f"risk-{i}-{j + 1}", "risk"))
    for i, s in enumerate(report.summary):
        for j, k in enumerate(s.key_sentences):
            spans.append((k.char_start, k.char_end, f"summary-{i}-{j}", "summary"))
    return [sp for sp in spans if sp[1] > sp[0]]


def _highlight(text: str, spans: list[tuple[int, int, str, str]]) -> str:
    """The source with each span marked; a span's anchor is on its first marked segment."""
    points = sorted({0, len(text)} | {max(0, min(len(text), p)) for s, e, _, _ in spans for p in (s, e)})
    out = []
    for p, q in zip(points, points[1:]):
        seg = html.escape(text[p:q])
        covering = [sp for sp in spans if sp[0] <= p < sp[1]]
        if not covering:
            out.append(seg)
            continue
        # The class of the most specific span (a clause over a risk over a summary sentence).
        order = {"": 0, "unverified": 0, "risk": 1, "summary": 2}
        cls = min((sp[3] for sp in covering), key=lambda c: order.get(c, 3))
        starting = [sp for sp in covering if sp[0] == p]
        inner = seg
        for sp in starting[1:]:
            inner = f'<mark id="{sp[2]}" class="{sp[3]}">{inner}</mark>'
        ident = f' id="{starting[0][2]}"' if starting else ""
        klass = f' class="{cls}"' if cls else ""
        out.append(f"<mark{ident}{klass}>{inner}</mark>")
    return "".join(out)


def _value(v: Any) -> str:
    e = html.escape
    if isinstance(v, dict):
        if not v:
            return "<span class='muted'>none</span>"
        rows = "".join(f"<tr><td>{e(str(k))}</td><td>{_value(x)}</td></tr>" for k, x in v.items())
        return f"<table>{rows}</table>"
    if isinstance(v, (list, tuple)):
        return e(", ".join(str(x) for x in v)) if v else "<span class='muted'>none</span>"
    if v is None:
        return "<span class='muted'>-</span>"
    return e(str(v))


def _searched(c) -> str:
    e = html.escape
    s = c.searched or {}
    parts = []
    if s.get("query"):
        parts.append(f"query <i>{e(s['query'])}</i>")
    secs = s.get("sections_with_matching_headings") or []
    parts.append("sections with matching headings: " + (e("; ".join(secs)) if secs else "none"))
    if s.get("retrieved_pages"):
        parts.append("pages retrieval ranked first: " + e(", ".join(str(p) for p in s["retrieved_pages"])))
    if s.get("sentences_scored") is not None:
        parts.append(f"{s['sentences_scored']} sentences scored")
    if c.candidates:
        b = c.candidates[0]
        parts.append(f"best evidence {e(str(b.get('section')))} scored {b.get('score')} "
                     f"(threshold {c.threshold})")
    return "; ".join(parts)


_RUN_LABELS = {"total_s": "total time (s)", "pipeline_s": "review time (s)", "step_s": "time per step (s)",
               "model_calls": "model calls", "effective_context_utilization": "share of the document attended",
               "clauses_found": "clauses found", "clauses_not_found": "clauses not found",
               "model_choices": "model's choices among close candidates", "risks_by_rule": "risks by rule",
               "verified_citation_share": "citations verified against the source",
               "prefills_on_replica": "document prefills on the replica", "replica": "model replica"}


def _clause_card(c, i: int) -> str:
    e = html.escape
    if not c.present:
        note = f"<br><span class='muted'>{e(c.note)}</span>" if c.note else ""
        return (f"<div class='card absent' id='finding-{i}'><b>{e(c.kind)}</b>: <i>not found</i>{note}"
                f"<br><span class='muted'>Searched: {_searched(c)}</span></div>")
    badge = "verified" if c.verified else "unverified quote"
    how = {"model": "the model's scores moved the pick", "rules": "best-scored candidate"}.get(c.chosen_by, c.chosen_by)
    if c.model_agrees is not None:
        how += "; the model " + ("agreed" if c.model_agrees else "preferred another candidate")
    where = f"{e(c.section)}, " if c.section else ""
    quote = " ".join(c.citation.quote.split())
    return (f"<div class='card' id='finding-{i}'><b>{e(c.kind)}</b> <span class='muted'>({where}page "
            f"{c.citation.page}, {badge}; {e(how)})</span><br><a href='#clause-{i}'>&ldquo;{e(quote)}"
            f"&rdquo;</a></div>")


def _risk_card(r, i: int) -> str:
    e = html.escape
    ev = (f"<a href='#risk-{i}'>evidence</a>" if r.citation is not None else "<span class='muted'>no evidence "
          "span: about something missing</span>")
    more = "".join(f" <a href='#risk-{i}-{j + 1}'>[{j + 2}]</a>" for j in range(len(r.other_evidence)))
    model = ""
    if r.severity_probs:
        probs = ", ".join(f"{k} {v:.2f}" for k, v in r.severity_probs.items())
        top = r.model_severity or max(r.severity_probs, key=r.severity_probs.get)
        model = f"<br><span class='muted'>model's severity (secondary): {e(top)} ({probs})</span>"
    return (f"<div class='card risk' id='finding-risk-{i}'><b>{e(r.clause_kind)}</b> &middot; "
            f"<code>{e(r.rule or 'model')}</code>: <span class='sev-{r.severity}'>{r.severity}</span> &middot; "
            f"{ev}{more}<br>{e(r.rationale)}<br><i>Recommendation:</i> {e(r.recommendation)}{model}</div>")


def _findings(report: ReviewReport, document: int | None, level: str) -> list[str]:
    """Clause, risk and summary sections of one document (or of the whole text)."""
    e = html.escape
    out = [f"<{level}>Clauses</{level}>"]
    out += [_clause_card(c, i) for i, c in enumerate(report.clauses) if c.document == document]
    risks = [(i, r) for i, r in enumerate(report.risks) if r.document == document]
    out.append(f"<{level}>Risks</{level}>")
    out += [_risk_card(r, i) for i, r in risks] or ["<p class='muted'>No rule fired.</p>"]
    summary = [(i, s) for i, s in enumerate(report.summary) if s.document == document]
    if summary:
        out.append(f"<details><summary>Summary by section ({len(summary)})</summary><ol>")
        for i, s in summary:
            sents = " ".join(f"<a href='#summary-{i}-{j}'>{e(' '.join(k.quote.split()))}</a>"
                             for j, k in enumerate(s.key_sentences)) or e(s.summary) or "<i>(no summary)</i>"
            title = f"<b>{e(s.title)}</b>: " if s.title else ""
            out.append(f"<li>{title}{sents}</li>")
        out.append("</ol></details>")
    return out


def render_html(report: ReviewReport, text: str) -> str:
    e = html.escape
    doc = report.document
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
             f"content='width=device-width,initial-scale=1'><title>Review: {e(str(doc.source))}"
             f"</title><style>{_CSS}</style></head><body><div id='findings'>",
             f"<h1>Review of {e(str(doc.source))}</h1>",
             f"<p class='muted'>{doc.num_tokens} tokens, {doc.num_pages} pages, "
             f"{sum(d.how != 'other' for d in report.documents) or 1} document(s), attention: {e(str(doc.attention))}. "
             f"<span class='key'><mark>clause</mark> <mark class='risk'>risk</mark> "
             f"<mark class='summary'>summary</mark></span></p>"]
    parts.extend(f"<div class='card note'>Note: {e(n)}</div>" for n in report.notes)
    if report.documents:
        parts.append("<h2>Documents</h2><table class='docs'><tr><th>document</th><th>clauses found</th>"
                     "<th>risks</th></tr>")
        for d in report.documents:
            if d.how == "other":
                parts.append(f"<tr class='muted'><td>{e(d.name)} (characters {d.char_start}-{d.char_end})</td>"
                             f"<td colspan='2'>not an agreement: not reviewed</td></tr>")
                continue
            parts.append(f"<tr><td><a href='#doc-{d.index}'>{e(d.name)}</a></td><td>{d.clauses_found} of "
                         f"{d.clauses_found + len(d.clauses_not_found)}</td><td>{d.risks}</td></tr>")
        parts.append("</table>")
        # Numbered among the reviewed documents: text before the first agreement is not one.
        for n, d in enumerate((d for d in report.documents if d.how != "other"), 1):
            parts.append(f"<section id='doc-{d.index}'><h2>{n}. {e(d.name)}</h2>")
            parts += _findings(report, d.index, "h3")
            parts.append("</section>")
    else:
        parts += _findings(report, None, "h2")
    parts.append("<details><summary>Run details</summary><table class='run'>")
    for k, v in report.stats.items():
        parts.append(f"<tr><th>{e(_RUN_LABELS.get(k, k.replace('_', ' ')))}</th><td>{_value(v)}</td></tr>")
    parts.append("</table></details>")
    if report.errors:
        parts.append("<h2>Errors</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in report.errors) + "</ul>")
    parts.append(f"</div><div id='source'>{_highlight(text, cited_spans(report))}</div></body></html>")
    return "".join(parts)
