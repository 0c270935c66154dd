"""Request bodies: size-capped reads, strict JSON, pydantic validation, multipart, ids; SSE framing."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ValidationError

from agentctx.entrypoints.http.errors import APIError, validation_error

__all__ = ["read_body", "decode_json", "validate_model", "read_json", "parse_multipart", "multipart_parts", "check_id",
           "bool_field", "sse", "SSE_HEADERS"]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) past ``limit`` bytes whatever Content-Length claims."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"request body over {limit} bytes", code="request_too_large", param="body",
                           limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def decode_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8 only, no NaN/Infinity, no lone surrogates; every failure a 400."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"body is not valid UTF-8 ({exc.reason} at byte {exc.start})", code="invalid_utf8",
                       param="body") from None
    if not text.strip():
        raise APIError(400, "body is empty; send a JSON object", code="invalid_json", param="body")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise APIError(400, "body is nested too deeply", code="invalid_json", param="body") from None
    except ValueError as exc:  # JSONDecodeError, huge integers, NaN
        raise APIError(400, f"body is not valid JSON: {exc}", code="invalid_json", param="body") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise APIError(400, "body holds an invalid Unicode string (lone surrogate escape)", code="invalid_unicode",
                       param="body") from None
    except RecursionError:
        raise APIError(400, "body is nested too deeply", code="invalid_json", param="body") from None
    return obj


def validate_model(model: type[BaseModel], obj: Any) -> Any:
    if not isinstance(obj, dict):
        raise APIError(422, "body must be a JSON object", code="invalid_type", param="body")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _check_json_type(request: Request) -> None:
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"content type {media!r} not supported; send application/json",
                       code="unsupported_media_type", param="content-type")


async def read_json(request: Request, model: type[BaseModel], limit: int) -> Any:
    _check_json_type(request)
    return validate_model(model, decode_json(await read_body(request, limit)))


def parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[bytes, str | None]]:
    """``name -> (bytes, filename)`` of a multipart/form-data body (the first part of each name)."""
    parts: dict[str, tuple[bytes, str | None]] = {}
    for name, payload, filename in multipart_parts(body, content_type):
        parts.setdefault(name, (payload, filename))
    return parts


def multipart_parts(body: bytes, content_type: str) -> list[tuple[str, bytes, str | None]]:
    """Every named part of a multipart/form-data body as ``(name, bytes, filename)``, in order (several
    ``file`` parts are several files); stdlib parser, no extra dependency."""
    from email import policy
    from email.parser import BytesParser

    try:
        head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    except UnicodeEncodeError:
        raise APIError(400, "malformed multipart content type", code="invalid_multipart",
                       param="content-type") from None
    try:
        msg = BytesParser(policy=policy.HTTP).parsebytes(head + body)
        if not msg.is_multipart():
            raise ValueError("not multipart")
        parts: list[tuple[str, bytes, str | None]] = []
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if not isinstance(name, str) or not name:
                continue
            parts.append((name, part.get_payload(decode=True) or b"", part.get_filename()))
        return parts
    except APIError:
        raise
    except Exception:
        raise APIError(400, "malformed multipart/form-data body", code="invalid_multipart", param="body") from None


def check_id(value: str, pattern, param: str) -> str:
    if not pattern.match(value) or ".." in value:
        raise APIError(400, f"malformed {param}", code=f"invalid_{param}", param=param)
    return value


def bool_field(raw: bytes | None, param: str) -> bool:
    if raw is None:
        return False
    v = raw.decode("latin-1").strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("", "0", "false", "no", "off"):
        return False
    raise APIError(422, f"{param} must be true or false", code="invalid_type", param=param)


def sse(data: dict | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode("utf-8")
