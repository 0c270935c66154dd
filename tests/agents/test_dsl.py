import pytest
from pydantic import ValidationError

from agentctx.agents import AgentSpec
from agentctx.pipelines.document_review import review_pipeline
from agentctx.pipelines.dsl import Pipeline, PipelineSpec, load_pipeline


def test_builder_wires_fan_out_over_step_outputs():
    p = Pipeline("t")
    c = p.step("clauses", "clause_extractor", over=[{"clause": "payment"}])
    p.step("risks", AgentSpec(role="risk_assessor"), over=c, when="present")
    spec = p.spec
    assert spec.steps[1].source_step == "clauses" and [s.name for s in spec.order()] == ["clauses", "risks"]


@pytest.mark.parametrize("steps,msg", [
    ([{"name": "a", "agent": "qa", "inputs": ["b"]}, {"name": "b", "agent": "qa", "inputs": ["a"]}], "cycle"),
    ([{"name": "a", "agent": "qa", "inputs": ["zz"]}], "unknown step"),
    ([{"name": "a", "agent": "poet"}], "unknown role"),
    ([{"name": "a", "agent": "qa"}, {"name": "a", "agent": "qa"}], "duplicate"),
    ([{"name": "a", "agent": "qa", "over": "everything"}], "over must be"),
    ([{"name": "a", "agent": "qa", "retries": -1}], "retries"),
    ([{"name": "a", "agent": "qa", "num_agents": 0}], "num_agents"),
    ([{"name": "a", "agent": {"role": "qa", "temperature": 2}}], "temperature"),
])
def test_invalid_pipelines_fail_naming_the_problem(steps, msg):
    with pytest.raises(ValidationError, match=msg):
        PipelineSpec.model_validate({"name": "x", "steps": steps})


def test_yaml_roundtrip(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("name: quick\nsteps:\n  - name: qa\n    agent: qa\n    over: [{question: 'Who pays?'}]\n")
    spec = load_pipeline(f)
    assert spec.steps[0].over == [{"question": "Who pays?"}]
    with pytest.raises(FileNotFoundError):
        load_pipeline(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_pipeline(tmp_path / "bad.yaml")


def test_review_pipeline_shape():
    spec = review_pipeline(dense=True)
    assert [s.name for s in spec.order()] == ["clauses", "summarize", "risks"]
    assert all(s.agent.dense for s in spec.steps)
