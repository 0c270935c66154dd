"""Runtime: start (or join) Ray, connect the KV store, retrieval and model replicas.

``Runtime.start()`` is the one start path of the Python API, the CLI and the HTTP API:

    with Runtime.start() as rt:
        ctx = rt.load_context(text)          # tokenize, prefill once, index, publish
        plan = ctx.plan("termination fee")   # pages to attend
        ctx.generate("\\n\\nQuestion: ...\\nAnswer:", plan)

It starts (or joins) Ray, then the store actor, the retrieval actor and the model
application, in that order. A local Ray is started when no cluster address is given
(``RAY_ADDRESS`` selects one). Without ``AGENTCTX_REDIS_URL`` the directory lives in a
store-side actor of this Ray cluster, and the log says so. ``Runtime.connect()`` is the
same view from inside a running cluster (the HTTP ingress and its jobs actor).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from agentctx.common import settings
from agentctx.config import AgentctxConfig
from agentctx.context import Context
from agentctx.kv_store.doc_blob import DOC_BLOB, encode_doc_blob
from agentctx.retrieval_service import RetrievalService
from agentctx.serving.serve.progress import Progress, ProgressCallback

__all__ = ["Runtime", "LoadResult", "context_id_for", "init_ray", "retrieval_actor", "RETRIEVAL_ACTOR"]

log = logging.getLogger(__name__)
RETRIEVAL_ACTOR = "agentctx-retrieval"


@contextmanager
def _progress_bar(show: bool, total: int, then: ProgressCallback | None) -> Iterator[ProgressCallback | None]:
    """A callback that moves a tqdm bar (when ``show``) and calls ``then``."""
    if not show:
        yield then
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="tok", unit_scale=True, desc="prefill", dynamic_ncols=True) as bar:
        def report(p: Progress) -> None:
            bar.update(max(0, p.done - bar.n))
            if then is not None:
                then(p)

        yield report


def context_id_for(model_id: str, tenant: str, text: str) -> str:
    """Deterministic id: the same document, model and tenant reattach instead of prefilling again."""
    h = hashlib.sha256()
    for part in (model_id, tenant, text):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return "ctx-" + h.hexdigest()[:32]


@dataclass(frozen=True)
class LoadResult:
    context_id: str
    num_tokens: int
    num_pages: int
    prefilled: bool  # False when the context already existed (reattached)
    prefill_s: float
    index_s: float  # indexing time left after the prefill (the two overlap)
    total_s: float


def init_ray(config: AgentctxConfig, *, num_cpus: int | None = None) -> bool:
    """Join ``RAY_ADDRESS``'s cluster or start a local Ray (unless one is up); True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    address = settings.ray_address()
    if address:
        log.info("joining Ray cluster at %s", address)
        ray.init(address=address, namespace=config.store.namespace, log_to_driver=False)
        return False
    log.info("no RAY_ADDRESS: starting a local Ray")
    ray.init(num_cpus=num_cpus or os.cpu_count(), namespace=config.store.namespace, include_dashboard=False,
             log_to_driver=False)
    return True


def retrieval_actor(config: AgentctxConfig):
    """The namespace's retrieval service: one named actor, made by whoever asks first."""
    import ray

    return ray.remote(RetrievalService).options(
        name=RETRIEVAL_ACTOR, namespace=config.store.namespace, get_if_exists=True, num_cpus=0
    ).remote(config.model.page_size, config.section_pages, config.store.redis_url, config.store.namespace)


class Runtime:
    """Handles to the store, the retrieval service and the model replicas of one cluster."""

    def __init__(self, config: AgentctxConfig, store, client, retrieval, owns_ray: bool = False):
        self.config = config
        self.store = store
        self.client = client
        self.retrieval = retrieval
        self._owns_ray = owns_ray

    @classmethod
    def start(cls, config: AgentctxConfig | None = None, *, num_cpus: int | None = None,
              http: bool = False) -> "Runtime":
        """Start (or join) Ray, the store, the retrieval service and the model replicas.

        ``http``: also start Serve's HTTP proxy on ``config.serve.host:port`` (the HTTP API's
        ingress is then deployed onto it by ``agentctx.entrypoints.http.server``).
        """
        from ray import serve

        from agentctx.serving.serve.client import ServeReplicaClient
        from agentctx.serving.serve.deployments import deploy_replicas

        config = config or AgentctxConfig()
        owns_ray = init_ray(config, num_cpus=num_cpus)
        if http:
            serve.start(http_options={"host": config.serve.host, "port": config.serve.port})
        if config.store.redis_url:
            log.info("KV directory: Redis at %s", config.store.redis_url)
        else:
            log.warning("no AGENTCTX_REDIS_URL: KV directory is held in-process by the store actor "
                        "(not durable across a Ray restart; set a Redis URL for production)")
        rt = cls.connect(config, None)
        log.info("starting model replica(s): %s", config.model.path or "embedded Gemma 3 270M")
        stall = config.serve.stall_timeout_s
        rt.client = ServeReplicaClient(deploy_replicas(config.replica_config()), timeout_s=stall, stall_s=stall)
        rt._owns_ray = owns_ray
        return rt

    @classmethod
    def connect(cls, config: AgentctxConfig, client, retrieval=None) -> "Runtime":
        """The runtime of a cluster that is up: connects the store, gets (or makes) the retrieval actor.

        ``client`` reaches the model replicas (a ``ServeReplicaClient``); ``retrieval`` an actor
        handle already held.
        """
        from agentctx.kv_store import KVStore

        store = KVStore.connect(config.store.redis_url, namespace=config.store.namespace,
                                budget_bytes=config.store.budget_bytes, lease_ttl_s=config.store.lease_ttl_s)
        return cls(config, store, client, retrieval if retrieval is not None else retrieval_actor(config))

    @property
    def owns_ray(self) -> bool:
        """Whether this runtime started Ray (``shutdown`` then stops Serve and Ray)."""
        return self._owns_ray

    # ------------------------------------------------------------------ contexts
    @property
    def policy(self):
        return self.config.retrieval

    def load_context(self, text: str, tenant: str = "default", *, allow_empty: bool = False,
                     on_progress: ProgressCallback | None = None, progress: bool = False
                     ) -> tuple[Context, LoadResult]:
        """Tokenize, prefill once, publish pages, index chunks; returns an open Context.

        The same text again reattaches; whatever the stored context lost (pages or blobs gone
        with a store actor or a restart) is rebuilt from this text first (``prefilled`` then
        says whether that took a prefill). ``allow_empty``: ``""`` is the no-document context.
        ``on_progress``: called with a ``Progress`` after each prefill chunk; ``progress``: a
        progress bar on stderr (tokens, tokens/s, ETA).
        """
        import ray

        t0 = time.perf_counter()
        doc = self.client.tokenize_document(text, allow_empty=True) if allow_empty else \
            self.client.tokenize_document(text)
        model_id = self.client.info()["model_id"]
        cid = context_id_for(model_id, tenant, text)
        # Index while the replica prefills: the two run in other processes, and the index's first
        # use loads the embedding model (~20 s on the 2-core CPU machine) that would otherwise follow.
        indexed = self.retrieval.index_document.remote(cid, text, doc.offsets) if text else None
        with _progress_bar(progress, len(doc.token_ids), on_progress) as report:
            pre = self.client.prefill_context(cid, tenant, doc, on_progress=report)
            prefilled = pre.prefill_s > 0
            if not prefilled:  # already listed: put back what a restart or an eviction lost, from this text
                prefilled = self.client.restore_context(cid, tenant, text, on_progress=report).prefilled
        t1 = time.perf_counter()
        if self.store.missing_blobs(cid, [DOC_BLOB]):
            self.store.put_blob(cid, DOC_BLOB, encode_doc_blob(text, doc.offsets), tenant=tenant)
        if indexed is not None:
            ray.get(indexed)
        t2 = time.perf_counter()
        ctx = self.attach(cid, tenant, text=text)
        res = LoadResult(cid, pre.num_tokens, pre.num_pages, prefilled, pre.prefill_s, t2 - t1, t2 - t0)
        log.info("context %s: %d tokens, %d pages, %s in %.1f s (index %.1f s)", cid, res.num_tokens,
                 res.num_pages, "prefilled" if prefilled else "reattached", res.total_s, res.index_s)
        return ctx, res

    def restore_context(self, context_id: str, tenant: str = "default"):
        """Put back a stored context's lost pages and blobs from its kept document (a no-op when whole);
        ``ContextLostError`` when nothing to rebuild it from remains."""
        return self.client.restore_context(context_id, tenant)

    def attach(self, context_id: str, tenant: str = "default", text: str | None = None,
               holder_id: str | None = None) -> Context:
        handle = self.store.open(context_id, tenant, holder_id=holder_id)
        return Context(handle, self.client, self.retrieval, self.policy, text=text)

    def delete_context(self, context_id: str, tenant: str = "default") -> None:
        import ray

        self.store.delete_context(context_id, tenant)
        ray.get(self.retrieval.drop.remote(context_id))

    # ------------------------------------------------------------------ lifetime
    def shutdown(self) -> None:
        import ray
        from ray import serve

        if self._owns_ray and ray.is_initialized():
            try:
                serve.shutdown()
            finally:
                ray.shutdown()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
