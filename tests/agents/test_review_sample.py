"""End to end: the main job's review of the bundled sample on the real Gemma 3 270M.

Real Ray, the real model, one prefill. The bundled sample was labelled by reading it
(tests/fixtures/sample_labels.py:SAMPLE_SECTIONS): parties in the preamble, governing law in ARTICLE 21
("the State of New York"), and so on; a kind repeated in a schedule counts in either place.
~90 s on the 2-core CPU machine, most of it the prefill: marked slow.
"""

from __future__ import annotations

import json
import uuid

import pytest

from agentctx.config import AgentctxConfig
from agentctx.pipelines.document_review import run_review
from agentctx.runtime import Runtime
from tests.fixtures.sample_labels import SAMPLE_SECTIONS, sample_check

pytestmark = [pytest.mark.model, pytest.mark.ray, pytest.mark.slow]


def test_sample_review_gets_every_kind_in_its_section(tmp_path, ray_local):
    from agentctx.entrypoints.cli import SAMPLE_CONTRACT

    text = SAMPLE_CONTRACT.read_text()
    cfg = AgentctxConfig()
    cfg.store.namespace = f"t-{uuid.uuid4().hex[:8]}"
    rt = Runtime.start(cfg)
    try:
        report = run_review(rt, text, source="sample_contract.txt", out_dir=tmp_path, progress=False)
    finally:
        from ray import serve

        serve.delete("agentctx-model")
    data = json.loads((tmp_path / "report.json").read_text())
    assert sample_check(data) == dict.fromkeys(SAMPLE_SECTIONS, True), [(c["kind"], c["section"])
                                                                         for c in data["clauses"]]
    by_kind = {c.kind: c for c in report.clauses}
    assert "State of New York" in by_kind["governing_law"].quote
    assert by_kind["parties"].quote.startswith("This Master Services Agreement is made on September 19, 2022")
    for c in report.clauses:  # whole source sentences: verified, no clause number in front
        assert c.verified and text[c.citation.char_start:c.citation.char_end] == c.quote
        assert not c.quote[0].isdigit()
    rules = {r.rule for r in report.risks}
    assert {"automatic_renewal", "termination_for_convenience", "liability_carve_out", "late_payment_interest",
            "governing_law_venue"} <= rules
    law = next(r for r in report.risks if r.rule == "governing_law_venue")
    assert law.severity == "medium" and law.facts["venue"] == "England and Wales"
    for r in report.risks:  # the model's severity is a secondary signal beside the rule's
        assert r.rationale.endswith(".") and r.recommendation != r.rationale
        assert not r.severity_probs or abs(sum(r.severity_probs.values()) - 1) < 1e-3
    assert all(s.summary and not s.summary[0].isdigit() for s in report.summary)
    assert report.stats["prefills_on_replica"] == 1
    html = (tmp_path / "report.html").read_text()
    assert all(f'id="clause-{i}"' in html for i, c in enumerate(report.clauses) if c.present)
