"""Structured output logic, driven by a scripted LLM (the real-model path is in test_pipeline)."""

import pytest
from pydantic import BaseModel

from agentctx.findings import RiskFields
from agentctx.structured import StructuredOutputError, fill_fields, generate_json, repair_json


class Scripted:
    """Plays back completions; choose() picks the option containing `prefer`."""

    def __init__(self, completions, prefer="medium"):
        self.completions = list(completions)
        self.prefer = prefer
        self.prompts = []

    def complete(self, prompt, *, max_new_tokens, stop):
        self.prompts.append(prompt)
        return self.completions.pop(0)

    def choose(self, prompt, options):
        self.prompts.append(prompt)
        return next(i for i, o in enumerate(options) if self.prefer in o)


def test_fill_fields_builds_valid_json_and_feeds_earlier_fields():
    llm = Scripted(['Uncapped "liability" exposure', "Negotiate a cap"])
    out = fill_fields(llm, "P:", RiskFields)
    assert out.severity == "medium" and out.rationale == 'Uncapped "liability" exposure'
    # later prompts carry the earlier fields as escaped JSON
    assert '"severity": "medium"' in llm.prompts[-1] and '\\"liability\\"' in llm.prompts[-1]


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
