"""Start and stop the HTTP API: ``agentctx serve`` (``serve_forever``) and tests (``start_http``/``stop_http``)."""

from __future__ import annotations

import logging
import signal
import threading

import ray
from ray import serve

from agentctx.config import AgentctxConfig
from agentctx.entrypoints.auth import ApiKeyAuth
from agentctx.entrypoints.http.app import HTTP_APP, ingress_app
from agentctx.entrypoints.http.jobs import JOBS_ACTOR
from agentctx.runtime import Runtime

__all__ = ["start_http", "stop_http", "serve_forever"]

log = logging.getLogger(__name__)


def start_http(cfg: AgentctxConfig, *, num_cpus: int | None = None) -> tuple[Runtime, str]:
    """Start the runtime with Serve's HTTP proxy on ``cfg.serve.host:port``, then the ingress.

    Returns ``(runtime, url)``; undo with ``stop_http``.
    """
    ApiKeyAuth(cfg.serve.api_keys)  # a missing "env:" key fails here, not in a replica restart loop
    rt = Runtime.start(cfg, num_cpus=num_cpus, http=True)
    serve.run(ingress_app(cfg), name=HTTP_APP, route_prefix="/")
    host = "127.0.0.1" if cfg.serve.host in ("0.0.0.0", "::") else cfg.serve.host
    return rt, f"http://{host}:{cfg.serve.port}"


def stop_http(rt: Runtime, *, shutdown_serve: bool = True) -> None:
    """Delete the ingress, stop the background-jobs actor, and shut Serve (and an owned Ray) down."""
    try:
        serve.delete(HTTP_APP)
    except Exception as exc:
        log.debug("serve.delete(%s): %s", HTTP_APP, exc)
    try:
        ray.kill(ray.get_actor(JOBS_ACTOR, namespace=rt.config.store.namespace), no_restart=True)
    except Exception:
        pass
    if shutdown_serve:
        try:
            serve.shutdown()
        except Exception as exc:
            log.debug("serve.shutdown: %s", exc)
    rt.shutdown()


def serve_forever(cfg: AgentctxConfig) -> None:
    """``agentctx serve``: start everything, print the URL, block until Ctrl-C / SIGTERM, clean up."""
    stop = threading.Event()

    def _stop(signum, _frame):
        log.info("signal %d: shutting down", signum)
        stop.set()

    rt, url = start_http(cfg)
    old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    auth = "API keys required" if cfg.serve.api_keys else "auth OFF (no serve.api_keys)"
    print(f"agentctx serving on {url}  ({auth}; OpenAI base_url {url}/v1; Ctrl-C to stop)", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        stop_http(rt)
