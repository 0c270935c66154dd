"""Structured output logic, driven by a scripted LLM (the real-model path is in test_pipeline)."""

import pytest
from pydantic import BaseModel

from agentctx.findings import RiskFields
from agentctx.structured import StructuredOutputError, fill_fields, generate_json, repair_json


class Scripted:
    """Plays back completions; scores() favours the option containing `prefer` (by e^3 over each other)."""

    def __init__(self, completions, prefer="medium"):
        self.completions = list(completions)
        self.prefer = prefer
        self.prompts = []

    def complete(self, prompt, *, max_new_tokens, stop):
        self.prompts.append(prompt)
        return self.completions.pop(0)

    def scores(self, prompt, options):
        self.prompts.append(prompt)
        return [-1.0 if self.prefer in o else -4.0 for o in options]


def test_fill_fields_builds_valid_json_and_feeds_earlier_fields():
    llm = Scripted(['Uncapped "liability" exposure', "Negotiate a cap"])
    out = fill_fields(llm, "P:", RiskFields)
    assert out.severity == "medium" and out.rationale == 'Uncapped "liability" exposure'
    # later prompts carry the earlier fields as escaped JSON
    assert '"severity": "medium"' in llm.prompts[-1] and '\\"liability\\"' in llm.prompts[-1]


def test_fill_fields_reports_each_choice_options_probabilities():
    probs = {}
    out = fill_fields(Scripted(["r", "c"], prefer="high"), "P:", RiskFields, choice_probs=probs)
    assert out.severity == "high" and set(probs) == {"severity"}
    p = probs["severity"]
    assert list(p) == ["low", "medium", "high"] and abs(sum(p.values()) - 1) < 1e-3
    e3 = 2.718281828 ** 3
    assert abs(p["high"] - e3 / (e3 + 2)) < 1e-3 and p["low"] == p["medium"]


def test_fill_fields_numbers_retry_then_fail():
    class N(BaseModel):
        amount: int

    assert fill_fields(Scripted(["abc", "42"]), "", N, max_attempts=2).amount == 42
    with pytest.raises(StructuredOutputError, match="amount"):
        fill_fields(Scripted(["x", "y"]), "", N, max_attempts=2)


def test_repair_json_handles_fences_trailing_commas_and_prose():
    raw = 'Sure!\n```json\n{"severity": "high", "rationale": "a {b}", "recommendation": "c",}\n```'
    assert RiskFields.model_validate_json(repair_json(raw)).severity == "high"


def test_generate_json_retries_then_raises_clear_error():
    good = '{"severity": "low", "rationale": "r", "recommendation": "x"}'
    assert generate_json(Scripted(["nope", good]), "P", RiskFields).severity == "low"
    with pytest.raises(StructuredOutputError, match="after 2 attempts"):
        generate_json(Scripted(['{"severity": "extreme"}', "{}"]), "P", RiskFields, max_attempts=2)
