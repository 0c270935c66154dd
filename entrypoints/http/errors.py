"""Errors as HTTP answers: ``APIError`` and the mapping of everything else onto one.

Errors are JSON ``{"error": {"message", "type", "code", "param", "limit"}}``. Store and
replica outages are 503 with ``Retry-After``, never 500.
"""

from __future__ import annotations

import asyncio
import logging
import math

import ray
from pydantic import ValidationError
from starlette.responses import JSONResponse

from agentctx.entrypoints.schemas import validation_error_detail
from agentctx.kv_store.errors import (
    BlobNotFoundError,
    ContextExistsError,
    ContextLostError,
    ContextNotFoundError,
    InvalidInputError,
    PagesMissingError,
    StoreError,
    StoreUnavailableError,
)
from agentctx.serving.types import ContextTooLongError, EmptyInputError

__all__ = ["APIError", "map_exception", "validation_error", "retry_headers", "unwrap", "is_replica_failure"]

log = logging.getLogger(__name__)


class APIError(Exception):
    """An error with its HTTP answer; ``map_exception`` turns anything else into one."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, limit: int | float | None = None, headers: dict | None = None,
                 extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type, code
        self.param, self.limit, self.headers, self.extra = param, limit, dict(headers or {}), extra or {}

    def body(self) -> dict:
        err = {"message": self.message, "type": self.type, "code": self.code, "param": self.param}
        if self.limit is not None:
            err["limit"] = self.limit
        err.update(self.extra)
        return {"error": err}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers or None)


def retry_headers(seconds: float) -> dict:
    return {"Retry-After": str(max(0, math.ceil(seconds)))}


def unwrap(exc: BaseException) -> BaseException:
    """The user exception inside Ray's task-error wrappers."""
    for _ in range(8):
        cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
        if cause is None or cause is exc:
            break
        exc = cause
    return exc


def is_replica_failure(exc: BaseException) -> bool:
    from ray.serve.exceptions import DeploymentUnavailableError

    exc = unwrap(exc)
    return isinstance(exc, (ray.exceptions.RayActorError, DeploymentUnavailableError,
                            ray.exceptions.OwnerDiedError)) or type(exc).__name__ == "ReplicaUnavailableError"


def map_exception(exc: BaseException, retry_after_s: float = 1.0) -> APIError:
    """Every failure as an HTTP answer: store and replica outages are 503 + Retry-After, never 500."""
    from ray.serve.exceptions import BackPressureError

    exc = unwrap(exc)
    retry = retry_headers(retry_after_s)
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, BackPressureError):
        ra = exc.retry_after_s if getattr(exc, "retry_after_s", None) is not None else retry_after_s
        return APIError(503, "the model is busy (request queue full); retry later", type="server_busy",
                        code="busy", headers=retry_headers(ra))
    if isinstance(exc, ContextNotFoundError):
        return APIError(404, f"context {exc.context_id!r} not found", type="not_found", code="context_not_found",
                        param="context_id")
    if isinstance(exc, StoreUnavailableError) or (isinstance(exc, StoreError) and exc.retryable):
        return APIError(503, "the KV store is unavailable; retry later", type="service_unavailable",
                        code="store_unavailable", headers=retry)
    if isinstance(exc, PagesMissingError):
        return APIError(503, "context pages are being restored; retry later", type="service_unavailable",
                        code="pages_missing", headers=retry)
    if isinstance(exc, ContextLostError):
        return APIError(409, str(exc), type="conflict", code="context_lost", param="context_id")
    if isinstance(exc, BlobNotFoundError):
        return APIError(503, "the context is being restored; retry later", type="service_unavailable",
                        code="context_restoring", headers=retry)
    if isinstance(exc, ContextExistsError):
        return APIError(409, str(exc), code="context_exists")
    if isinstance(exc, InvalidInputError):
        return APIError(400, str(exc), code="invalid_input")
    if isinstance(exc, ContextTooLongError):
        return APIError(413, str(exc), code="context_too_long", param="text")
    if isinstance(exc, EmptyInputError):
        return APIError(422, str(exc), code="empty_input")
    if is_replica_failure(exc):
        return APIError(503, "no model replica is available; retry later", type="service_unavailable",
                        code="replica_unavailable", headers=retry)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ray.exceptions.GetTimeoutError)):
        return APIError(504, "the model did not answer in time", type="timeout", code="timeout", headers=retry)
    log.error("unexpected error while serving a request", exc_info=exc)
    return APIError(500, "internal error", type="internal_error", code="internal_error")


def validation_error(exc: ValidationError, prefix: str = "") -> APIError:
    """A pydantic ValidationError as a 422 naming the first failing field."""
    d = validation_error_detail(exc, prefix)
    return APIError(422, d["message"], code=d["code"], param=d["param"], limit=d["limit"],
                    extra={"errors": d["errors"]})
