"""AgentActor: one agent as a Ray actor holding its own reference to the context.

The actor opens a ContextHandle on start (refcount +1, lease renewed in the
background) and releases it on ``close`` or when it dies (lease expiry). It never
holds KV itself: model calls go to the replicas, which share the store's pages.
"""

from __future__ import annotations

import time
import traceback
import uuid
from typing import Any

import ray

__all__ = ["AgentActor", "AgentTaskResult"]


def AgentTaskResult(output: dict | None, error: str | None, stats: dict, seconds: float) -> dict:
    """Plain dict (crosses Ray cheaply): output or error, with the agent's call stats."""
    return {"output": output, "error": error, "stats": stats, "seconds": seconds}


@ray.remote(num_cpus=0, max_restarts=0)
class AgentActor:
    def __init__(self, spec: dict, context_id: str, tenant: str, client, policy: dict,
                 redis_url: str | None, namespace: str, retrieval_actor: str):
        from agentctx.agents import ROLES, AgentSpec
        from agentctx.context import Context
        from agentctx.kv_store import KVStore
        from agentctx.retrieval.policy import SelectionPolicy

        self.spec = AgentSpec.model_validate(spec)
        if self.spec.role not in ROLES:
            raise ValueError(f"unknown agent role {self.spec.role!r}; known: {sorted(ROLES)}")
        store = KVStore.connect_cached(redis_url, namespace)
        holder = f"agent-{self.spec.display_name}-{uuid.uuid4().hex[:8]}"
        handle = store.open(context_id, tenant, holder_id=holder)
        retrieval = ray.get_actor(retrieval_actor, namespace=namespace)
        self.ctx = Context(handle, client, retrieval, SelectionPolicy.model_validate(policy))
        self.agent = ROLES[self.spec.role](self.spec)

    def holder_id(self) -> str:
        return self.ctx.handle.holder_id

    def run(self, task: dict[str, Any]) -> dict:
        t0 = time.perf_counter()
        before = self.agent.stats.model_copy()
        try:
            out = self.agent.run(self.ctx, task)
            output, error = out.model_dump(mode="json"), None
        except Exception as exc:  # reported per task; the runner decides on retries
            output, error = None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        after = self.agent.stats
        delta = {k: getattr(after, k) - getattr(before, k) for k in type(after).model_fields}
        return AgentTaskResult(output, error, delta, time.perf_counter() - t0)

    def close(self) -> None:
        self.ctx.close()
