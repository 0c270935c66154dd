"""Ray Serve deployment of ModelReplica (GPU when configured, CPU otherwise)."""

from __future__ import annotations

import asyncio
import logging

from ray import serve

from agentctx.serving.config import ReplicaConfig
from agentctx.serving.serve.load import LoadMeter
from agentctx.serving.serve.progress import aevents
from agentctx.serving.serve.restore import RestoreResult
from agentctx.serving.types import GenerateRequest, GenerateResult, ScoreRequest, TokenizedDoc

__all__ = ["ModelReplicaDeployment", "replica_app", "deploy_replicas", "deployment_options", "REPLICA_APP"]

log = logging.getLogger(__name__)
REPLICA_APP = "agentctx-model"


@serve.deployment(name="ModelReplica")
class ModelReplicaDeployment:
    """Serve wrapper: every method forwards to a ModelReplica bound to the shared store.

    Model work runs in a worker thread so the replica's event loop keeps answering
    health checks and cheap calls while a long prefill runs.
    """

    def __init__(self, config: ReplicaConfig):
        from agentctx.kv_store import KVStore
        from agentctx.serving.serve.replica import ModelReplica

        _set_cpu_threads(config)
        store = KVStore.connect_cached(config.redis_url, config.namespace)
        self.replica = ModelReplica(config.engine, store=store)
        self.load = LoadMeter()

    @serve.multiplexed(max_num_models_per_replica=64)
    async def _context(self, context_id: str) -> str:
        # Registering the id is what routes later requests for it here (affinity);
        # the pages themselves load lazily in the engine's device cache.
        return context_id

    async def _touch(self) -> None:
        cid = serve.get_multiplexed_model_id()
        if cid:
            await self._context(cid)

    async def info(self) -> dict:
        return {**self.replica.info(), **self.load.snapshot()}

    async def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc:
        return await asyncio.to_thread(self.replica.tokenize_document, text, allow_empty)

    async def render_chat(self, messages: list[dict]) -> str | None:
        return self.replica.render_chat(messages)

    async def prefill_context_events(self, context_id: str, tenant: str, doc: TokenizedDoc,
                                     extra: dict | None = None):
        """``prefill_context`` as a stream (``handle.options(stream=True)``): a ``Progress`` per
        chunk, then the ``PrefillResult`` (``serving/serve/progress.py``)."""
        await self._touch()
        async for item in aevents(lambda on_chunk: self.replica.prefill_context(
                context_id, tenant, doc, False, extra, on_chunk=on_chunk)):
            yield item

    async def restore_context_events(self, context_id: str, tenant: str, text: str | None = None):
        """``restore_context`` as a stream: a ``Progress`` per re-prefill chunk, then the result."""
        await self._touch()
        async for item in aevents(lambda on_chunk: self.replica.restore_context(context_id, tenant, text, on_chunk)):
            yield item

    # Generation and scoring go straight to the engine loop: the request is queued there and its
    # tokens come back on this event loop (serving/engine/local.py), no thread per request.
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        await self._touch()
        with self.load.running_since(self.load.arrive()):
            return await self.replica.agenerate(req)

    async def score(self, req: ScoreRequest) -> list[float]:
        await self._touch()
        with self.load.running_since(self.load.arrive()):
            return await self.replica.ascore(req)

    def stream(self, req: GenerateRequest):
        yield from self.replica.stream(req)

    async def stream_events(self, req: GenerateRequest):
        """Stream ``("delta", text)`` items, then one ``("result", GenerateResult)``.

        Call with ``handle.options(stream=True)``. When the caller goes away (Serve cancels this
        generator) the request is cancelled in the engine loop at its next step."""
        await self._touch()
        with self.load.running_since(self.load.arrive()):
            async for item in self.replica.astream_events(req):
                yield item

    async def drop_context(self, context_id: str) -> bool:
        return self.replica.drop_context(context_id)

    async def repair_context(self, context_id: str, tenant: str) -> int:
        """Re-prefill a context whose pages were evicted from the store; returns pages put back."""
        return (await self.restore_context(context_id, tenant)).pages_put

    async def restore_context(self, context_id: str, tenant: str, text: str | None = None) -> RestoreResult:
        """Put back a stored context's missing pages and blobs (``serving/serve/restore.py``)."""
        await self._touch()
        return await asyncio.to_thread(self.replica.restore_context, context_id, tenant, text)


def _set_cpu_threads(cfg: ReplicaConfig) -> None:
    """Ray sets OMP_NUM_THREADS=1 in an actor with num_cpus=0, which leaves a CPU replica on one
    core. Give a CPU replica the node's cores (shared by the replicas of the node), or
    AGENTCTX_REPLICA_THREADS."""
    import os

    import torch

    from agentctx.common import settings

    if cfg.num_gpus_per_replica > 0 or (cfg.engine.device or "cpu").startswith("cuda"):
        return
    default = max(1, (os.cpu_count() or 1) // max(1, min(cfg.num_replicas, os.cpu_count() or 1)))
    torch.set_num_threads(max(1, settings.env_int("REPLICA_THREADS", default)))


def deployment_options(cfg: ReplicaConfig) -> dict:
    """Serve options of the model deployment (also what ``deploy/serve.yaml`` mirrors)."""
    # On a CPU-only box the replica takes no Ray CPU slot: agents and the store
    # actor must still be schedulable on a 2-core machine.
    opts = {
        "num_replicas": cfg.num_replicas,
        "max_ongoing_requests": cfg.max_ongoing_requests,
        "ray_actor_options": {"num_cpus": 0, "num_gpus": cfg.num_gpus_per_replica},
    }
    # Beyond max_ongoing_requests per replica, at most max_queued_requests wait at
    # each caller; more raise BackPressureError (the HTTP ingress answers 503 + Retry-After).
    if cfg.max_queued_requests >= 0:
        opts["max_queued_requests"] = cfg.max_queued_requests
        opts["backpressure_config"] = {"status_code": 503, "retry_after_s": cfg.retry_after_s}
    return opts


def replica_app(cfg: ReplicaConfig):
    return ModelReplicaDeployment.options(**deployment_options(cfg)).bind(cfg)


def deploy_replicas(cfg: ReplicaConfig):
    """Start (or update) the model application and return its DeploymentHandle."""
    return serve.run(replica_app(cfg), name=REPLICA_APP, route_prefix=None)
