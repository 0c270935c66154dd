"""The platform end to end on real Ray, Ray Serve and redis-server, with a tiny random model.

The tiny model's text is gibberish; what is checked is the machinery: one prefill
for many agents, references held and released, fan-out/fan-in, retries, reports.
"""

from __future__ import annotations

import json
import uuid

import pytest

from agentctx.agents import AgentSpec
from agentctx.config import AgentctxConfig
from agentctx.pipelines.document_review import run_review
from agentctx.pipelines.dsl import Pipeline
from agentctx.pipelines.runner import PipelineRunner
from agentctx.retrieval.documents import join_documents
from agentctx.runtime import Runtime
from tests.factories import make_tiny_checkpoint

pytestmark = [pytest.mark.ray, pytest.mark.redis]

DOC = "\n".join(
    f"{i}.1 The Vendor shall deliver batch {i} within {i + 3} days. "
    f"{i}.2 Either Party may terminate this Agreement on {30 + i} days' notice. "
    f"{i}.3 This Agreement is governed by the laws of State {i}."
    for i in range(12)
)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, redis_url, ray_local):
    path = make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("tiny"))
    cfg = AgentctxConfig.model_validate({
        "model": {"path": str(path), "page_size": 64, "prefill_chunk_tokens": 128, "device": "cpu"},
        "store": {"redis_url": redis_url, "namespace": f"t-{uuid.uuid4().hex[:8]}"},
        "retrieval": {"top_k_pages": 3, "recent_tokens": 64},
        "section_pages": 8,
    })
    rt = Runtime.start(cfg)
    yield rt
    from ray import serve

    serve.delete("agentctx-model")


def test_many_agents_one_prefill_and_references_released(runtime):
    ctx, load = runtime.load_context(DOC, tenant="t1")
    assert load.prefilled and runtime.client.info()["prefills"] == 1
    p = Pipeline("t", max_concurrency=4)
    clauses = p.step("clauses", AgentSpec(role="clause_extractor", max_new_tokens=12),
                     over=[{"clause": k} for k in ("termination", "payment", "governing_law", "term")], num_agents=4)
    p.step("risks", AgentSpec(role="risk_assessor", max_new_tokens=8), over=clauses, when="present")
    p.step("qa", AgentSpec(role="qa", max_new_tokens=8), over=[{"question": "Who may terminate?"}])
    result = PipelineRunner(runtime, progress=False).run(p.spec, ctx.context_id, "t1")
    assert not any(s.errors for s in result.steps.values()), {n: s.errors for n, s in result.steps.items()}
    outs = result.outputs("clauses")
    assert len(outs) == 4
    # risks left num_agents unset: one actor per task in flight, up to max_concurrency
    present = sum(o["present"] for o in outs)
    assert result.steps["clauses"].agents == 4 and result.steps["risks"].agents == min(4, present)
    assert result.steps["qa"].agents == 1
    for o in outs:  # quotes are spans of the source, so every present clause is verified
        assert not o["present"] or o["citation"]["verified"]
        if o["present"]:
            c = o["citation"]
            assert DOC[c["char_start"]:c["char_end"]] == c["quote"]
    assert len(result.outputs("risks")) == sum(o["present"] for o in outs)  # one assessment per clause found
    risks = [r for a in result.outputs("risks") for r in a["risks"]]
    assert {r["rule"] for r in risks} >= {"governing_law_venue"}  # "governed by the laws of State 0"
    for r in risks:  # the rule sets the severity; the model's probabilities ride beside it
        probs = r["severity_probs"]
        assert set(probs) == {"low", "medium", "high"} and abs(sum(probs.values()) - 1) < 1e-3
        assert probs[r["model_severity"]] == max(probs.values())
    assert runtime.client.info()["prefills"] == 1  # eight agents, still one prefill
    # only the test's own Context still holds the context
    assert list(runtime.store.holders(ctx.context_id)) == [ctx.handle.holder_id]
    assert set(runtime.store.refcounts(ctx.page_ids)) == {1}
    ctx.close()
    assert runtime.store.holders(ctx.context_id) == {}
    assert set(runtime.store.refcounts(ctx.page_ids)) == {0}
    # reloading the same document reattaches: no second prefill
    ctx2, load2 = runtime.load_context(DOC, tenant="t1")
    assert not load2.prefilled and runtime.client.info()["prefills"] == 1
    ctx2.close()


def test_failed_tasks_are_retried_then_reported(runtime):
    ctx, _ = runtime.load_context(DOC, tenant="t2")
    p = Pipeline("bad")
    p.step("qa", AgentSpec(role="qa", max_new_tokens=4), over=[{"question": "  "}, {"question": "ok?"}], retries=1)
    result = PipelineRunner(runtime, progress=False).run(p.spec, ctx.context_id, "t2")
    step = result.steps["qa"]
    assert step.attempts == 3 and len(step.errors) == 1 and "empty question" in step.errors[0]
    assert len(step.ok_outputs) == 1
    ctx.close()


def test_review_writes_json_and_html(runtime, tmp_path):
    report = run_review(runtime, DOC, tenant="t3", out_dir=tmp_path, progress=False,
                        clause_kinds=("termination", "governing_law"))
    data = json.loads((tmp_path / "report.json").read_text())
    assert {c["kind"] for c in data["clauses"]} == {"termination", "governing_law"}
    # one extractive summary per numbered section ("0.1" ... "11.1"), never a clause number
    assert len(data["summary"]) == 12
    assert all(s["summary"] and not s["summary"][0].isdigit() for s in data["summary"])
    assert data["sections"][0]["number"] == "0.1"
    assert data["stats"]["prefills_on_replica"] >= 1 and 0 < data["stats"]["effective_context_utilization"] <= 1
    html = (tmp_path / "report.html").read_text()
    assert "<mark id=\"clause-" in html or not any(c.present for c in report.clauses)
    holders = runtime.store.holders(report.document.context_id)
    assert holders == {}  # the review released its reference


def _agreement(title: str, law: str, days: int) -> str:
    return (f"{title}\n\nThis {title.title()} (the \"Agreement\") is entered into by and between Alder Ltd. "
            f"(\"Supplier\") and Birch Inc. (\"Customer\").\n\n"
            f"1. Payment. Customer will pay each invoice within {days} days of receipt.\n\n"
            f"2. Termination. Either party may terminate this Agreement on {days} days' written notice.\n\n"
            f"3. Governing Law. This Agreement is governed by the laws of the State of {law}.\n")


def test_case_file_review_reviews_each_document_apart(runtime, tmp_path):
    """Two files joined into one context (one prefill): each finding cites its own document, each
    document reports its own clauses and risks, and the different governing laws are noted."""
    docs = [("supply.txt", _agreement("SUPPLY AGREEMENT", "Oregon", 45)),
            ("services.txt", _agreement("SERVICES AGREEMENT", "Vermont", 30))]
    report = run_review(runtime, docs, tenant="t4", out_dir=tmp_path, progress=False,
                        clause_kinds=("payment", "termination", "governing_law"))
    assert [d.name for d in report.documents] == ["supply.txt", "services.txt"]
    # each document's own section tree: "1." restarts in the second, and is not nested in the first
    assert [(s["document"], s["number"]) for s in report.sections if s["level"] == 1] == [
        (d, n) for d in (0, 1) for n in ("1", "2", "3")]
    assert report.stats["prefills_on_replica"] >= 1
    assert sorted((c.document, c.kind) for c in report.clauses) == [
        (d, k) for d in (0, 1) for k in ("governing_law", "payment", "termination")]
    text = join_documents(docs)  # the joined text is what the citations index
    for c in report.clauses:
        assert c.present and c.verified
        doc = report.documents[c.document]
        assert doc.char_start <= c.citation.char_start and c.citation.char_end <= doc.char_end
        assert text[c.citation.char_start:c.citation.char_end] == c.quote
    laws = {c.document: c.quote for c in report.clauses if c.kind == "governing_law"}
    assert "Oregon" in laws[0] and "Vermont" in laws[1]
    assert any("different laws" in n and "Oregon" in n and "Vermont" in n for n in report.notes)
    assert all(r.document in (0, 1) for r in report.risks)
    html = (tmp_path / "report.html").read_text()
    assert "<section id='doc-0'>" in html and "<section id='doc-1'>" in html


def test_qa_quotes_the_operative_sentence_of_the_kind_and_document_asked(runtime):
    """A question that asks for a clause kind is answered by that kind's operative sentence; one that
    names a document of the case file, from that document (the tiny model's scores cannot move it)."""
    text = join_documents([("supply.txt", _agreement("SUPPLY AGREEMENT", "Oregon", 45)),
                           ("services.txt", _agreement("SERVICES AGREEMENT", "Vermont", 30))])
    ctx, _ = runtime.load_context(text, tenant="t5")
    try:
        p = Pipeline("qa")
        p.step("answers", AgentSpec(role="qa", max_new_tokens=8),
               over=[{"question": "Under the services agreement, which law governs?"},
                     {"question": "When must the customer pay under the supply agreement?"}])
        result = PipelineRunner(runtime, progress=False).run(p.spec, ctx.context_id, "t5")
    finally:
        ctx.close()
    law, pay = result.outputs("answers")
    assert law["chosen_by"] == "rules" and "laws of the State of Vermont" in law["quote"]
    assert pay["chosen_by"] == "rules" and "within 45 days" in pay["quote"]
    assert text[law["citation"]["char_start"]:law["citation"]["char_end"]] == law["quote"]
