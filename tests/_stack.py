"""A real HTTP stack for tests (tests/http, tests/reliability): Ray Serve on 127.0.0.1, tiny
model, real Redis directory.

``start_stack(cfg)`` runs what ``agentctx serve`` runs (``agentctx.entrypoints.http.server.start_http``)
inside the session's Ray (the ``ray_local`` fixture); ``stop_stack`` deletes the apps and kills the
namespace's actors so the next module starts clean. ``running_stack`` pairs the two for a
module's ``stack`` fixture::

    @pytest.fixture(scope="module")
    def stack(ray_local, redis_url, tiny_ckpt):
        with running_stack(tiny_config(tiny_ckpt, redis_url)) as s:
            yield s

What differs between modules stays in the module: the config (``tiny_config`` overrides, or the
real model), and whether it runs its own redis-server that its tests kill (``own_redis``).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from agentctx.config import AgentctxConfig

if TYPE_CHECKING:
    from tests.conftest import RedisServer

KEY_A = "key-acme-0123456789abcdef"
KEY_B = "key-globex-0123456789abcdef"
KEYS = {KEY_A: "acme", KEY_B: "globex"}

CONTRACT = (
    "MASTER SERVICES AGREEMENT\n\n"
    "1. Term. This Agreement starts on the Effective Date and continues for two years.\n"
    "2. Payment. The Customer shall pay each invoice within thirty days of receipt.\n"
    "3. Termination. Either party may terminate this Agreement with ninety days written notice.\n"
    "4. Liability. Neither party is liable for indirect or consequential damages.\n"
    "5. Confidentiality. Each party keeps the other party's confidential information secret.\n"
    "6. Governing Law. This Agreement is governed by the laws of the State of New York.\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_config(ckpt: Path, redis_url: str, **over) -> AgentctxConfig:
    data = {
        "model": {"path": str(ckpt), "page_size": 16, "prefill_chunk_tokens": 32, "max_context_tokens": 8192},
        "store": {"redis_url": redis_url, "namespace": f"http-{uuid.uuid4().hex[:8]}", "lease_ttl_s": 30.0},
        "serve": {"port": free_port(), "api_keys": dict(KEYS), "max_new_tokens": 4096,
                  "max_request_bytes": 256 << 10},
    }
    for section, values in over.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    return AgentctxConfig.model_validate(data)


@dataclass
class Stack:
    cfg: AgentctxConfig
    rt: object
    url: str
    clients: list = field(default_factory=list)

    def client(self, key: str | None = KEY_A, timeout: float = 60.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        c = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self.clients.append(c)
        return c

    def holders(self, context_id: str) -> dict:
        return self.rt.store.holders(context_id)

    def wait_no_holders(self, context_ids, timeout_s: float = 10.0) -> dict:
        """Poll until no context has a holder; returns what is left (empty when clean)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = {c: h for c in context_ids if (h := self.holders(c))}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)


def start_stack(cfg: AgentctxConfig) -> Stack:
    from ray import serve

    from agentctx.entrypoints.http.server import start_http

    serve.shutdown()  # a fresh Serve on this stack's port
    rt, url = start_http(cfg)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("ingress did not come up")
        time.sleep(0.2)
    return Stack(cfg, rt, url)


def stop_stack(stack: Stack) -> None:
    import ray

    from agentctx.entrypoints.http.server import stop_http
    from agentctx.runtime import RETRIEVAL_ACTOR

    for c in stack.clients:
        c.close()
    stop_http(stack.rt)
    try:
        ray.kill(ray.get_actor(RETRIEVAL_ACTOR, namespace=stack.cfg.store.namespace), no_restart=True)
    except Exception:
        pass
    stack.rt.store.shutdown(kill_actor=True)


@contextmanager
def running_stack(cfg: AgentctxConfig, *, own_redis: RedisServer | None = None) -> Iterator[Stack]:
    """``start_stack(cfg)``, then ``stop_stack`` when the block ends.

    ``own_redis``: the module's own redis-server (``cfg.store.redis_url``), which its tests kill;
    if one left it down, it is started again before the stop so that the stack's references are
    released in Redis."""
    stack = start_stack(cfg)
    try:
        yield stack
    finally:
        if own_redis is not None and own_redis.proc is None:
            own_redis.start()
        stop_stack(stack)


def sse_events(lines) -> list[tuple[str | None, str]]:
    """Parse SSE lines into (event, data) pairs."""
    out, event, data = [], None, []
    for line in lines:
        if line == "":
            if data:
                out.append((event, "\n".join(data)))
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        out.append((event, "\n".join(data)))
    return out
