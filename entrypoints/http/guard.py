"""The outermost ASGI layer: request id, auth, Content-Length cap, metrics, and every error as JSON.

It sits inside Starlette's ServerErrorMiddleware and outside routing, so it sees every
exception first. Every route but ``OPEN_PATHS`` needs an API key when ``serve.api_keys`` is set;
the key selects the tenant (``request.state.tenant``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import Headers
from starlette.routing import Match, get_route_path

from agentctx.entrypoints.auth import DEFAULT_TENANT
from agentctx.entrypoints.http.errors import APIError
from agentctx.entrypoints.http.service import ApiService

__all__ = ["Guard", "OPEN_PATHS"]

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # what goes into logs as a caller's id


class Guard:
    """Outermost ASGI layer: request id, auth, Content-Length cap, metrics, and errors as JSON."""

    def __init__(self, app, svc: ApiService):
        self.app, self.svc = app, svc

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        svc = self.svc
        t0 = time.perf_counter()
        # Behind Ray Serve's proxy the request already carries an id (the client's, or one the proxy
        # made) and the proxy echoes it on the response: adopt it and add no second header. Hosted
        # any other way, make one and echo it.
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        rid = given if given and _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        echo = not given
        state = {"status": 0, "started": False}

        async def send_wrapped(message):
            if message["type"] == "http.response.start":
                state["started"], state["status"] = True, message["status"]
                if echo:
                    sent = list(message.get("headers", [])) + [(b"x-request-id", rid.encode())]
                    message = dict(message, headers=sent)
            await send(message)

        svc.metrics.in_flight.inc()
        try:
            tenant = DEFAULT_TENANT
            if not _known_path(scope):
                # Before auth: a path no route serves is a 404 to anyone, as a client that typed
                # it wrong needs to hear (a 401 would send them looking at their key).
                err = APIError(404, f"no route {get_route_path(scope)!r}", type="not_found", code="not_found")
                return await err.response()(scope, receive, send_wrapped)
            if get_route_path(scope) not in OPEN_PATHS:
                tenant = svc.auth.tenant_for(headers.get("authorization"), headers.get("x-api-key"))
                if tenant is None:
                    err = APIError(401, "missing or invalid API key (send Authorization: Bearer KEY)",
                                   type="authentication_error", code="invalid_api_key",
                                   headers={"WWW-Authenticate": "Bearer"})
                    return await err.response()(scope, receive, send_wrapped)
                length = headers.get("content-length")
                limit = svc.cfg.serve.max_request_bytes
                if length is not None:
                    if not length.strip().isdigit():
                        err = APIError(400, "malformed Content-Length", code="invalid_header", param="content-length")
                        return await err.response()(scope, receive, send_wrapped)
                    if int(length) > limit:
                        err = APIError(413, f"request body over {limit} bytes", code="request_too_large",
                                       param="body", limit=limit)
                        return await err.response()(scope, receive, send_wrapped)
            scope.setdefault("state", {}).update(tenant=tenant, request_id=rid)
            await self.app(scope, receive, send_wrapped)
        except Exception as exc:
            err = svc.count(svc.error(exc))
            if not state["started"]:
                await err.response()(scope, receive, send_wrapped)
            else:
                log.warning("error after the response started (%s): %s", rid, exc)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            svc.metrics.observe_request(template, scope.get("method", "?"), state["status"] or 499,
                                        time.perf_counter() - t0)
            svc.metrics.in_flight.dec()


def _known_path(scope) -> bool:
    """Whether any route of the app serves this path (by any method: a wrong method is a 405)."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", None)
    if routes is None:  # not under a Starlette app: let routing decide
        return True
    return any(route.matches(scope)[0] != Match.NONE for route in routes)
