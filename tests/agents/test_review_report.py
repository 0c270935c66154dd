"""The review report's notes: a warning when every risk got the same severity."""

from agentctx.findings import RiskFinding
from agentctx.pipelines.report import ReviewDocument, ReviewReport, severity_note
from agentctx.pipelines.report_html import render_html


def _risk(kind, severity, p):
    probs = {s: (p if s == severity else (1 - p) / 2) for s in ("low", "medium", "high")}
    return RiskFinding(clause_kind=kind, severity=severity, rationale="r", recommendation="c", severity_probs=probs)


def test_all_alike_severities_get_a_note_with_their_mean_probability():
    risks = [_risk("a", "high", 0.5), _risk("b", "high", 0.7), _risk("c", "high", 0.9)]
    note = severity_note(risks)
    assert note.startswith("all 3 risks were rated 'high'; mean probability of 'high' 0.70")
    assert "unranked" in note


def test_mixed_or_few_severities_get_none():
    assert severity_note([_risk("a", "high", 0.5), _risk("b", "low", 0.6), _risk("c", "high", 0.9)]) is None
    assert severity_note([_risk("a", "high", 0.5), _risk("b", "high", 0.6)]) is None  # too few to say
    assert severity_note([]) is None


def test_findings_without_probabilities_still_get_the_note():
    risks = [RiskFinding(clause_kind=k, severity="low", rationale="", recommendation="") for k in "abc"]
    assert severity_note(risks) == ("all 3 risks were rated 'low': on this document the model's severity does "
                                    "not tell the clauses apart, so treat it as unranked and read each clause")


def test_html_shows_the_note_and_each_choices_probability():
    risks = [_risk("a", "high", 0.5), _risk("b", "high", 0.7), _risk("c", "high", 0.9)]
    doc = ReviewDocument(source="x", context_id="c", num_tokens=1, num_pages=1, page_size=256)
    report = ReviewReport(document=doc, risks=risks, notes=[severity_note(risks)])
    html = render_html(report, "text")
    assert "Note: all 3 risks were rated &#x27;high&#x27;" in html or "Note: all 3 risks were rated 'high'" in html
    assert "(p=0.70)" in html and "(p=0.90)" in html
