"""Ray Serve deployment of ModelReplica (GPU when configured, CPU otherwise)."""

from __future__ import annotations

import asyncio
import logging

from ray import serve

from agentctx.config import AgentctxConfig
from serving.types import GenerateRequest, GenerateResult, PrefillResult, ScoreRequest, TokenizedDoc

__all__ = ["ModelReplicaDeployment", "replica_app", "deploy_replicas", "REPLICA_APP"]

log = logging.getLogger(__name__)
REPLICA_APP = "agentctx-model"


@serve.deployment(name="ModelReplica")
class ModelReplicaDeployment:
    """Serve wrapper: every method forwards to a ModelReplica bound to the shared store.

    Model work runs in a worker thread so the replica's event loop keeps answering
    health checks and cheap calls while a long prefill runs.
    """

    def __init__(self, config: dict):
        from agentctx.kv_store import KVStore
        from serving.replica import ModelReplica

        cfg = AgentctxConfig.model_validate(config)
        store = KVStore.connect_cached(cfg.store.redis_url, cfg.store.namespace)
        self.replica = ModelReplica(cfg, store=store)

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
        return self.replica.info()

    async def tokenize_document(self, text: str) -> TokenizedDoc:
        return await asyncio.to_thread(self.replica.tokenize_document, text)

    async def prefill_context(self, context_id: str, tenant: str, doc: TokenizedDoc, extra: dict | None = None
                              ) -> PrefillResult:
        await self._touch()
        return await asyncio.to_thread(self.replica.prefill_context, context_id, tenant, doc, False, extra)

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        await self._touch()
        return await asyncio.to_thread(self.replica.generate, req)

    async def score(self, req: ScoreRequest) -> list[float]:
        await self._touch()
        return await asyncio.to_thread(self.replica.score, req)

    def stream(self, req: GenerateRequest):
        yield from self.replica.stream(req)

    async def drop_context(self, context_id: str) -> bool:
        return self.replica.drop_context(context_id)


def replica_app(cfg: AgentctxConfig):
    s = cfg.serve
    # On a CPU-only box the replica takes no Ray CPU slot: agents and the store
    # actor must still be schedulable on a 2-core machine.
    actor_opts = {"num_cpus": 0, "num_gpus": s.num_gpus_per_replica}
    return ModelReplicaDeployment.options(
        num_replicas=s.num_replicas,
        max_ongoing_requests=s.max_ongoing_requests,
        ray_actor_options=actor_opts,
    ).bind(cfg.model_dump())


def deploy_replicas(cfg: AgentctxConfig):
    """Start (or update) the model application and return its DeploymentHandle."""
    return serve.run(replica_app(cfg), name=REPLICA_APP, route_prefix=None)
