"""A readable HTML page of a review: findings link to highlighted spans of the source."""

from __future__ import annotations

import html

from agentctx.pipelines.report import ReviewReport

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:0;display:flex;height:100vh}
#findings{width:42%;overflow:auto;padding:1em;border-right:1px solid #ccc}
#source{flex:1;overflow:auto;padding:1em;white-space:pre-wrap;font-family:Georgia,serif;line-height:1.5}
mark{background:#fff3a8} mark.unverified{background:#ffd0d0} mark:target{background:#ffb300}
.sev-high{color:#b00020;font-weight:bold}.sev-medium{color:#b36b00}.sev-low{color:#2e7d32}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em .8em;margin:.5em 0}
.muted{color:#777;font-size:.9em} table{border-collapse:collapse} td{padding:2px 8px}
"""


def _spans(report: ReviewReport) -> list[tuple[int, int, str, bool]]:
    spans = []
    for i, c in enumerate(report.clauses):
        if c.citation is not None:
            spans.append((c.citation.char_start, c.citation.char_end, f"clause-{i}", c.citation.verified))
    return sorted(spans)


def _highlight(text: str, spans: list[tuple[int, int, str, bool]]) -> str:
    out, pos = [], 0
    for start, end, anchor, verified in spans:
        start = max(start, pos)  # overlapping spans: highlight the uncovered remainder
        if end <= start:
            out.append(f'<a id="{anchor}"></a>')
            continue
        out.append(html.escape(text[pos:start]))
        cls = "" if verified else ' class="unverified"'
        out.append(f'<mark id="{anchor}"{cls}>{html.escape(text[start:end])}</mark>')
        pos = end
    out.append(html.escape(text[pos:]))
    return "".join(out)


def render_html(report: ReviewReport, text: str) -> str:
    e = html.escape
    doc = report.document
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Review: {e(str(doc.source))}"
             f"</title><style>{_CSS}</style></head><body><div id='findings'>",
             f"<h1>Review of {e(str(doc.source))}</h1>",
             f"<p class='muted'>{doc.num_tokens} tokens, {doc.num_pages} pages, "
             f"attention: {e(str(doc.attention))}</p>"]
    anchors = {id(c): f"clause-{i}" for i, c in enumerate(report.clauses)}
    if report.summary:
        parts.append("<h2>Summary</h2><ol>")
        for s in report.summary:
            parts.append(f"<li>{e(s.summary) or '<i>(no summary)</i>'} <span class='muted'>(pages "
                         f"{s.pages[0]}&ndash;{s.pages[-1]})</span></li>")
        parts.append("</ol>")
    parts.append("<h2>Clauses</h2>")
    for c in report.clauses:
        if not c.present:
            parts.append(f"<div class='card'><b>{e(c.kind)}</b>: not found</div>")
            continue
        badge = "verified" if c.verified else "unverified quote"
        parts.append(f"<div class='card'><b>{e(c.kind)}</b> <span class='muted'>({badge}, page "
                     f"{c.citation.page})</span><br><a href='#{anchors[id(c)]}'>&ldquo;{e(c.citation.quote)}"
                     f"&rdquo;</a></div>")
    parts.append("<h2>Risks</h2>")
    parts.extend(f"<div class='card muted'>Note: {e(n)}</div>" for n in report.notes)
    by_kind = {c.kind: anchors[id(c)] for c in report.clauses if c.present}
    for r in report.risks:
        link = by_kind.get(r.clause_kind)
        kind = f"<a href='#{link}'>{e(r.clause_kind)}</a>" if link else e(r.clause_kind)
        p = r.severity_probs.get(r.severity)
        conf = f" <span class='muted'>(p={p:.2f})</span>" if p is not None else ""
        parts.append(f"<div class='card'>{kind}: <span class='sev-{r.severity}'>{r.severity}</span>{conf}<br>"
                     f"{e(r.rationale)}<br><i>Recommendation:</i> {e(r.recommendation)}</div>")
    parts.append("<h2>Run</h2><table>")
    for k, v in report.stats.items():
        parts.append(f"<tr><td>{e(str(k))}</td><td>{e(str(v))}</td></tr>")
    parts.append("</table>")
    if report.errors:
        parts.append("<h2>Errors</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in report.errors) + "</ul>")
    parts.append(f"</div><div id='source'>{_highlight(text, _spans(report))}</div></body></html>")
    return "".join(parts)
