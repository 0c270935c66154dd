"""``response_format`` of the OpenAI routes through the constrained fill (``agentctx/structured.py``).

We write the JSON skeleton and the model fills only leaf values: an enum is a scored choice among
its values, a boolean one of ``true``/``false``, a string is generated up to its closing quote and
escaped by us, numbers are parsed (and retried). The answer is therefore always a JSON object that
validates against the schema, even on a small model.

* ``{"type": "json_schema", "json_schema": {"name", "schema"}}``: a flat object schema whose
  properties are ``string``, ``integer``, ``number``, ``boolean`` or a string ``enum``; anything
  else (nested objects, arrays, ``$ref``...) is refused with a 400 naming the property.
* ``{"type": "json_object"}``: the object ``{"answer": "..."}``.
* ``{"type": "text"}`` or none: plain generation.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, create_model

from agentctx.entrypoints.http.errors import APIError
from agentctx.serving.types import GenerateRequest, GenerateResult, ScoreRequest
from agentctx.structured import StructuredOutputError, fill_fields

__all__ = ["response_model", "fill_response", "MAX_SCHEMA_FIELDS"]

MAX_SCHEMA_FIELDS = 32
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool}
_P = "response_format"


class JsonObjectAnswer(BaseModel):
    """What ``{"type": "json_object"}`` answers with."""

    answer: str


def response_model(fmt: dict[str, Any] | None) -> type[BaseModel] | None:
    """The schema to fill (None: plain text); a 400 naming the parameter for anything unsupported."""
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return JsonObjectAnswer
    if kind != "json_schema":
        raise APIError(400, f"response_format type {str(kind)[:40]!r} is not supported (text, json_object, "
                            "json_schema)", code="unsupported_parameter", param=f"{_P}.type")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise APIError(400, "response_format.json_schema needs a 'schema' object", code="invalid_schema",
                       param=f"{_P}.json_schema.schema")
    name = spec.get("name") if isinstance(spec.get("name"), str) and _KEY.match(spec.get("name")) else "Response"
    return _model_from_schema(spec["schema"], name)


def _model_from_schema(schema: dict, name: str) -> type[BaseModel]:
    where = f"{_P}.json_schema.schema"
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, dict) or not props:
        raise APIError(400, "the schema must be an object with properties", code="invalid_schema", param=where)
    if len(props) > MAX_SCHEMA_FIELDS:
        raise APIError(400, f"at most {MAX_SCHEMA_FIELDS} properties", code="invalid_schema",
                       param=f"{where}.properties", limit=MAX_SCHEMA_FIELDS)
    fields: dict[str, Any] = {}
    for key, prop in props.items():
        at = f"{where}.properties.{str(key)[:64]}"
        if not _KEY.match(key) or key.startswith("model_") or hasattr(BaseModel, key):
            raise APIError(400, "property names must be identifiers (letters, digits, _) not used by pydantic",
                           code="invalid_schema", param=at)
        fields[key] = (_field_type(prop, at), ...)
    try:
        return create_model(name, **fields)
    except Exception as exc:  # pydantic refuses the model: still the caller's schema
        raise APIError(400, f"unsupported schema: {str(exc).splitlines()[0][:200]}", code="invalid_schema",
                       param=where) from None


def _field_type(prop: Any, at: str):
    if not isinstance(prop, dict):
        raise APIError(400, "a property must be a schema object", code="invalid_schema", param=at)
    if "enum" in prop:
        values = prop["enum"]
        if (not isinstance(values, list) or not 1 <= len(values) <= 64
                or not all(isinstance(v, str) and 0 < len(v) <= 64 for v in values)):
            raise APIError(400, "enum must list 1-64 non-empty strings", code="invalid_schema", param=at)
        return Literal[tuple(dict.fromkeys(values))]
    tp = _TYPES.get(prop.get("type")) if isinstance(prop.get("type"), str) else None
    if tp is None:
        raise APIError(400, f"property type {str(prop.get('type'))[:40]!r} is not supported (string, integer, "
                            "number, boolean, string enum)", code="invalid_schema", param=at)
    return tp


class _ReplicaLLM:
    """agentctx.structured's LLM over one context: completions and option scores on a replica."""

    def __init__(self, client, base: GenerateRequest):
        self.client, self.base = client, base
        self.results: list[GenerateResult] = []

    def complete(self, prompt: str, *, max_new_tokens: int, stop: tuple[str, ...]) -> str:
        res = self.client.generate(replace(self.base, prompt=prompt, max_new_tokens=max_new_tokens, stop=stop))
        self.results.append(res)
        return res.text

    def scores(self, prompt: str, options: list[str]) -> list[float]:
        return self.client.score(ScoreRequest(self.base.context_id, prompt, tuple(options), self.base.pages,
                                              tenant=self.base.tenant))


def fill_response(client, base: GenerateRequest, model: type[BaseModel], context_tokens: int) -> GenerateResult:
    """Fill ``model`` after ``base.prompt`` (blocking: run it on a worker thread); one result whose
    text is the JSON object and whose counts add up every model call it took."""
    llm = _ReplicaLLM(client, base)
    max_chars = {name: max(8, base.max_new_tokens * 3) for name in model.model_fields}
    try:
        obj = fill_fields(llm, base.prompt, model, max_chars=max_chars)
    except StructuredOutputError as exc:
        raise APIError(422, f"the model gave no output matching response_format: {str(exc).splitlines()[0]}",
                       code="structured_output_failed", param=_P) from None
    text = json.dumps(obj.model_dump())
    rs = llm.results
    first = rs[0] if rs else None
    return GenerateResult(
        text=text, token_ids=[t for r in rs for t in r.token_ids],
        prompt_tokens=first.prompt_tokens if first else 0,
        pages_attended=first.pages_attended if first else len(base.pages or ()),
        attended_tokens=first.attended_tokens if first else context_tokens,
        context_tokens=first.context_tokens if first else context_tokens,
        ttft_s=first.ttft_s if first else 0.0, total_s=sum(r.total_s for r in rs), finish_reason="stop",
        replica=first.replica if first else "")
