"""Structured output from a language model: constrained fill, or repaired JSON with retries.

Two modes, both ending in a validated pydantic object:

* ``fill`` (default, works with small base models): we write the JSON skeleton
  ourselves and let the model produce only leaf values. A ``Literal`` field is a
  constrained choice scored by log-probability over its options (the model
  cannot answer outside them); a string field is generated up to its closing
  quote and JSON-escaped by us; numbers and bools are parsed and retried.
* ``json`` (instruction-tuned models): the model writes the JSON; we extract the
  object, repair common faults (code fences, trailing commas, single quotes),
  validate, and retry with the validation error in the prompt.

Either raises ``StructuredOutputError`` after ``max_attempts`` invalid outputs.
"""

from __future__ import annotations

import json
import math
import re
import typing
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

__all__ = ["StructuredOutputError", "LLM", "fill_fields", "generate_json", "repair_json"]


class StructuredOutputError(RuntimeError):
    """The model never produced output that validates against the schema."""


class LLM(Protocol):
    """What structured decoding needs: completion and option scoring over a fixed plan."""

    def complete(self, prompt: str, *, max_new_tokens: int, stop: tuple[str, ...]) -> str: ...
    def scores(self, prompt: str, options: list[str]) -> list[float]: ...  # log-prob of each option


def _pick(llm: LLM, prompt: str, options: list[str], labels: list[str], name: str,
          choice_probs: dict[str, dict[str, float]] | None) -> int:
    """The best-scored option; its share among the options (softmax of the log-probs) goes to
    ``choice_probs[name]``, so a caller can tell a clear choice from a coin toss."""
    s = llm.scores(prompt, options)
    k = max(range(len(options)), key=s.__getitem__)
    if choice_probs is not None:
        w = [math.exp(x - s[k]) for x in s]  # shifted by the best score: no overflow
        total = sum(w)
        choice_probs[name] = {lab: round(x / total, 4) for lab, x in zip(labels, w, strict=True)}
    return k


def _literal_options(tp) -> list[str] | None:
    if typing.get_origin(tp) is Literal:
        return [str(a) for a in typing.get_args(tp)]
    return None


def fill_fields(
    llm: LLM,
    prompt: str,
    schema: type[BaseModel],
    *,
    fixed: dict[str, Any] | None = None,
    max_chars: dict[str, int] | None = None,
    max_attempts: int = 2,
    choice_probs: dict[str, dict[str, float]] | None = None,
) -> BaseModel:
    """Fill the schema's fields in order; ``fixed`` values are written, not generated.

    The growing JSON text is part of the prompt, so later fields see earlier ones. For each
    choice field (``Literal``, bool), ``choice_probs`` (if given) receives each option's
    probability normalised over the options.
    """
    fixed = fixed or {}
    max_chars = max_chars or {}
    values: dict[str, Any] = {}
    text = prompt + "{"
    for i, (name, field) in enumerate(schema.model_fields.items()):
        sep = "" if i == 0 else ", "
        if name in fixed:
            values[name] = fixed[name]
            text += f"{sep}{json.dumps(name)}: {json.dumps(fixed[name], default=str)}"
            continue
        tp = field.annotation
        opts = _literal_options(tp)
        if opts is not None:
            head = f"{sep}{json.dumps(name)}: \""
            k = _pick(llm, text + head, [o + '"' for o in opts], opts, name, choice_probs)
            values[name] = opts[k]
            text += head + opts[k] + '"'
        elif tp is bool:
            head = f"{sep}{json.dumps(name)}: "
            values[name] = _pick(llm, text + head, ["true", "false"], ["true", "false"], name, choice_probs) == 0
            text += head + json.dumps(values[name])
        elif tp in (int, float):
            head = f"{sep}{json.dumps(name)}: "
            for _ in range(max_attempts):
                raw = llm.complete(text + head, max_new_tokens=12, stop=(",", "}", "\n")).strip()
                try:
                    values[name] = tp(raw)
                    break
                except ValueError:
                    continue
            else:
                raise StructuredOutputError(f"field {name!r}: model gave no valid {tp.__name__}")
            text += head + json.dumps(values[name])
        else:  # strings (and anything else rendered as a string)
            head = f"{sep}{json.dumps(name)}: \""
            limit = max_chars.get(name, 400)
            raw = llm.complete(text + head, max_new_tokens=max(8, limit // 3), stop=('"', "\n"))
            values[name] = raw.strip()[:limit]
            text += head + json.dumps(values[name])[1:]
    try:
        return schema.model_validate(values)
    except ValidationError as exc:
        raise StructuredOutputError(f"filled values do not validate against {schema.__name__}: {exc}") from exc


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def repair_json(text: str) -> str:
    """Best-effort repair: strip fences, cut to the outermost object, drop trailing commas."""
    t = _FENCE.sub("", text.strip())
    start = t.find("{")
    if start < 0:
        return t
    depth, end, in_str, esc = 0, -1, False, False
    for i in range(start, len(t)):
        c = t[i]
        if in_str:
            esc = (c == "\\") and not esc
            if c == '"' and not esc:
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    t = t[start : end + 1] if end > 0 else t[start:] + "}" * max(depth, 0)
    t = _TRAILING_COMMA.sub(r"\1", t)
    if "'" in t and '"' not in t:
        t = t.replace("'", '"')
    return t


def generate_json(llm: LLM, prompt: str, schema: type[BaseModel], *, max_attempts: int = 3,
                  max_new_tokens: int = 256) -> BaseModel:
    """Free JSON with repair and bounded retries; raises StructuredOutputError."""
    errors: list[str] = []
    p = prompt
    for _ in range(max_attempts):
        raw = llm.complete(p, max_new_tokens=max_new_tokens, stop=("\n\n\n",))
        try:
            return schema.model_validate_json(repair_json(raw))
        except (ValidationError, ValueError) as exc:
            errors.append(str(exc).splitlines()[0])
            p = f"{prompt}\n(previous answer was invalid: {errors[-1]}; answer with one JSON object)\n"
    raise StructuredOutputError(
        f"no valid {schema.__name__} after {max_attempts} attempts; last errors: {errors[-2:]}"
    )
