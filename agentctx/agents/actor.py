"""AgentActor: one agent as a Ray actor holding its own reference to the context.

The actor opens a ContextHandle on start (refcount +1, lease renewed in the
background) and releases it on ``close`` or when it dies (lease expiry). It never
holds KV itself: model calls go to the replicas, which share the store's pages.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from dataclasses import dataclass

import ray

from agentctx.agents.base import ROLES, AgentSpec, AgentTask
from agentctx.context import Context
from agentctx.retrieval.policy import SelectionPolicy

__all__ = ["AgentActor", "AgentTaskResult", "task_error"]

log = logging.getLogger(__name__)


def task_error(exc: BaseException) -> str:
    """``"Type: first line of the message"`` of the error inside Ray's wrappers."""
    for _ in range(8):
        cause = getattr(exc, "cause", None)
        if cause is None or cause is exc or not isinstance(cause, BaseException):
            break
        exc = cause
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:500] if lines else ''}".rstrip(": ")


@dataclass(frozen=True)
class AgentTaskResult:
    """What one task gave: the output (JSON-ready) or the error, with the agent's call stats for it."""

    output: dict | None
    error: str | None
    stats: dict[str, float]
    seconds: float


@ray.remote(num_cpus=0, max_restarts=0)
class AgentActor:
    """``store`` is a KVStore client (it travels by address); ``retrieval`` the retrieval actor's handle."""

    def __init__(self, spec: AgentSpec, context_id: str, tenant: str, client, policy: SelectionPolicy, store,
                 retrieval, holder_id: str | None = None):
        if spec.role not in ROLES:
            raise ValueError(f"unknown agent role {spec.role!r}; known: {sorted(ROLES)}")
        self.spec = spec
        # The runner may name the holder, so that it can release the reference of an actor it kills.
        holder = holder_id or f"agent-{spec.display_name}-{uuid.uuid4().hex[:8]}"
        handle = store.open(context_id, tenant, holder_id=holder)
        self.ctx = Context(handle, client, retrieval, policy)
        self.agent = ROLES[spec.role](spec)

    def holder_id(self) -> str:
        return self.ctx.handle.holder_id

    def run(self, task: AgentTask) -> AgentTaskResult:
        t0 = time.perf_counter()
        before = self.agent.stats.model_copy()
        try:
            out = self.agent.run(self.ctx, task)
            output, error = out.model_dump(mode="json"), None
        except Exception as exc:  # reported per task; the runner decides on retries
            # The traceback goes to this actor's log; the result (what API clients see) names the
            # error only: no stack frames, no server paths.
            log.warning("agent task failed\n%s", traceback.format_exc(limit=5))
            output, error = None, task_error(exc)
        after = self.agent.stats
        delta = {k: getattr(after, k) - getattr(before, k) for k in type(after).model_fields}
        return AgentTaskResult(output, error, delta, time.perf_counter() - t0)

    def close(self) -> None:
        self.ctx.close()
