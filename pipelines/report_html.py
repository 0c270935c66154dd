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
#findings{width:44%;overflow:auto;padding:1em;border-right:1px solid #ccc}
#source{flex:1;overflow:auto;padding:1em;white-space:pre-wrap;font-family:Georgia,serif;line-height:1.5}
mark{background:#fff3a8} mark.risk{background:#ffd8a8} mark.summary{background:#e3f0ff}
mark.unverified{background:#ffd0d0} mark:target{background:#ffb300;outline:2px solid #b36b00}
.sev-high{color:#b00020;font-weight:bold}.sev-medium{color:#b36b00}.sev-low{color:#2e7d32}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em .8em;margin:.5em 0}
.card.absent{background:#f6f6f6}
.muted{color:#777;font-size:.9em} table{border-collapse:collapse} td,th{padding:2px 8px;vertical-align:top;
text-align:left} table.run td{border-bottom:1px solid #eee} code{font-size:.85em}
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


def render_html(report: ReviewReport, text: str) -> str:
    e = html.escape
    doc = report.document
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Review: {e(str(doc.source))}"
             f"</title><style>{_CSS}</style></head><body><div id='findings'>",
             f"<h1>Review of {e(str(doc.source))}</h1>",
             f"<p class='muted'>{doc.num_tokens} tokens, {doc.num_pages} pages, "
             f"{len(report.sections)} sections, attention: {e(str(doc.attention))}</p>"]
    parts.append("<h2>Clauses</h2>")
    for i, c in enumerate(report.clauses):
        if not c.present:
            note = f"<br><span class='muted'>{e(c.note)}</span>" if c.note else ""
            parts.append(f"<div class='card absent' id='finding-{i}'><b>{e(c.kind)}</b>: <i>not found</i>{note}"
                         f"<br><span class='muted'>Searched: {_searched(c)}</span></div>")
            continue
        badge = "verified" if c.verified else "unverified quote"
        how = {"model": "the model's scores moved the pick", "rules": "best-scored candidate"}.get(
            c.chosen_by, c.chosen_by)
        if c.model_agrees is not None:
            how += "; the model " + ("agreed" if c.model_agrees else "preferred another candidate")
        where = f"{e(c.section)}, " if c.section else ""
        quote = " ".join(c.citation.quote.split())
        parts.append(f"<div class='card' id='finding-{i}'><b>{e(c.kind)}</b> <span class='muted'>({where}page "
                     f"{c.citation.page}, {badge}; {e(how)})</span><br><a href='#clause-{i}'>&ldquo;{e(quote)}"
                     f"&rdquo;</a></div>")
    parts.append("<h2>Risks</h2><p class='muted'>Severity is set by the named rule; the model's severity "
                 "probabilities are a secondary signal.</p>")
    parts.extend(f"<div class='card muted'>Note: {e(n)}</div>" for n in report.notes)
    for i, r in enumerate(report.risks):
        ev = (f"<a href='#risk-{i}'>evidence</a>" if r.citation is not None else "<span class='muted'>no evidence "
              "span: about something missing</span>")
        more = "".join(f" <a href='#risk-{i}-{j + 1}'>[{j + 2}]</a>" for j in range(len(r.other_evidence)))
        model = ""
        if r.severity_probs:
            probs = ", ".join(f"{k} {v:.2f}" for k, v in r.severity_probs.items())
            top = r.model_severity or max(r.severity_probs, key=r.severity_probs.get)
            model = f"<br><span class='muted'>model's severity (secondary): {e(top)} ({probs})</span>"
        parts.append(f"<div class='card'><b>{e(r.clause_kind)}</b> &middot; <code>{e(r.rule or 'model')}</code>: "
                     f"<span class='sev-{r.severity}'>{r.severity}</span> &middot; {ev}{more}<br>{e(r.rationale)}<br>"
                     f"<i>Recommendation:</i> {e(r.recommendation)}{model}</div>")
    if report.summary:
        parts.append("<h2>Summary by section</h2><ol>")
        for i, s in enumerate(report.summary):
            sents = " ".join(f"<a href='#summary-{i}-{j}'>{e(' '.join(k.quote.split()))}</a>"
                             for j, k in enumerate(s.key_sentences)) or e(s.summary) or "<i>(no summary)</i>"
            title = f"<b>{e(s.title)}</b>: " if s.title else ""
            parts.append(f"<li>{title}{sents}</li>")
        parts.append("</ol>")
    parts.append("<h2>Run</h2><table class='run'>")
    for k, v in report.stats.items():
        parts.append(f"<tr><th>{e(str(k))}</th><td>{_value(v)}</td></tr>")
    parts.append("</table>")
    if report.errors:
        parts.append("<h2>Errors</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in report.errors) + "</ul>")
    parts.append(f"</div><div id='source'>{_highlight(text, cited_spans(report))}</div></body></html>")
    return "".join(parts)
