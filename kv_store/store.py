"""KVStore: the facade the engine and the agents use.

``KVStore.connect()`` finds (or starts) the namespace's detached store actor
and a directory client; every method is a thin, typed wrapper that turns Ray
and Redis failures into the store's own errors. Page bytes move through the
object store (zero-copy on read); refcounts and leases go straight to the
directory so reattaching a context is one Redis round trip.

Freeing rule: ``delete_context`` drops the context's directory entry; each of
its pages that no other context lists and no handle holds is freed at once,
and a page still held is freed by the last release. Pages other contexts list
stay (they are merely evictable when nobody holds them).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import ray
import torch

from agentctx.common import settings

from .actor_directory import ActorDirectory
from .codec import PagePayload, QuantKVPage, decode_kv_quant, decode_payload, dtype_name, encode_bytes, encode_tensor
from .directories import make_directory
from .directory import Directory
from .errors import InvalidInputError, PagesMissingError, StoreError, StoreUnavailableError
from .handle import ContextHandle
from .hashing import page_hashes
from .records import BlobMeta, ContextRecord, DeleteResult, validate_id, validate_page_ids
from .store_actor import KVStoreActor, StoreConfig

__all__ = ["KVStore", "ACTOR_NAME", "DEFAULT_BUDGET_FRACTION"]

log = logging.getLogger(__name__)

ACTOR_NAME = "agentctx-kvstore"
#: Default host-tier budget: this share of the cluster's object store memory.
DEFAULT_BUDGET_FRACTION = 0.6
_PUT_CHUNK_BYTES = 64 << 20  # bounds the transient copy a put makes in the object store
_RemoteActor = ray.remote(KVStoreActor)


class KVStore:
    """Client of one namespace's store (actor + directory). Cheap to create per process."""

    _cache: dict[tuple[str, str], "KVStore"] = {}
    _cache_lock = threading.Lock()

    def __init__(self, actor: Any, directory: Directory | None, config: StoreConfig, lease_ttl_s: float,
                 quantize: bool = False, call_timeout_s: float = 60.0) -> None:
        self._actor = actor
        # No Redis: the directory lives in the store actor and is reached through it.
        self.directory = directory if directory is not None else ActorDirectory(self._call, actor)
        self.config = config
        self.namespace = config.namespace
        self.redis_url = config.redis_url or ""
        self.lease_ttl_s = float(lease_ttl_s)
        self.quantize = quantize
        self.call_timeout_s = call_timeout_s

    # -- connection ---------------------------------------------------------------------
    @classmethod
    def connect(cls, redis_url: str | None = None, namespace: str = "agentctx", budget_bytes: int | None = None,
                lease_ttl_s: float = 30.0, *, spill_dir: str | Path | None = None, spill_on_evict: bool = False,
                reap_interval_s: float | None = None, quantize: bool = False) -> "KVStore":
        """Get or start the namespace's store actor and connect to its directory.

        ``redis_url=None`` reads ``AGENTCTX_REDIS_URL``; ``""`` (or no setting)
        selects the in-process directory, hosted in the store actor. Budget,
        spill and reap settings apply when this call starts the actor; a
        running actor keeps its own (``set_budget`` changes the budget).
        """
        validate_id(namespace, "namespace")
        if redis_url is None:
            redis_url = settings.redis_url()
        redis_url = redis_url or None
        if not ray.is_initialized():
            ray.init(address=settings.ray_address(), include_dashboard=False, ignore_reinit_error=True)
        directory = make_directory(redis_url, namespace, local=lambda: None)  # None: the actor hosts it
        if directory is not None:
            directory.ping()  # fail fast with StoreUnavailableError rather than inside the actor
        if budget_bytes is None:
            budget_bytes = int(ray.cluster_resources().get("object_store_memory", 8 << 30) * DEFAULT_BUDGET_FRACTION)
        if budget_bytes <= 0:
            raise InvalidInputError("budget_bytes must be positive")
        config = StoreConfig(
            namespace=namespace, redis_url=redis_url, budget_bytes=int(budget_bytes),
            spill_dir=str(spill_dir or settings.cache_dir() / "kv_spill" / namespace),
            spill_on_evict=spill_on_evict,
            reap_interval_s=float(reap_interval_s or max(0.5, min(5.0, lease_ttl_s / 3))))
        actor = _RemoteActor.options(
            name=ACTOR_NAME, namespace=namespace, lifetime="detached", get_if_exists=True,
            num_cpus=0, max_concurrency=16, max_restarts=-1).remote(config)
        store = cls(actor, directory, config, lease_ttl_s, quantize)
        info = store._call(actor.info)
        running: StoreConfig = info["config"]
        if (running.redis_url or None) != redis_url:
            raise InvalidInputError(
                f"namespace {namespace!r} is served by a store actor using directory "
                f"{'redis' if running.redis_url else 'in-process'}; connect with the same redis_url")
        store.config = running
        return store

    @classmethod
    def connect_cached(cls, redis_url: str | None = None, namespace: str = "agentctx") -> "KVStore":
        """One store client per (redis_url, namespace) per process; what handle re-attachment uses."""
        key = (redis_url if redis_url is not None else (settings.redis_url() or ""), namespace)
        with cls._cache_lock:
            store = cls._cache.get(key)
            if store is None:
                store = cls._cache[key] = cls.connect(key[0], namespace)
            return store

    @classmethod
    def attach(cls, context_id: str, tenant: str, redis_url: str | None = None, namespace: str = "agentctx",
               holder_id: str | None = None, lease_ttl_s: float | None = None) -> ContextHandle:
        """Open a context by id from any process of the Ray cluster (reuses this process's store client)."""
        return cls.connect_cached(redis_url, namespace).open(context_id, tenant, holder_id, lease_ttl_s)

    def __reduce__(self):
        return (KVStore.connect_cached, (self.redis_url, self.namespace))

    def _call(self, method: Any, *args: Any) -> Any:
        """Call an actor method and wait; Ray failures become store errors."""
        try:
            return ray.get(method.remote(*args), timeout=self.call_timeout_s)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, StoreError):
                raise cause from None
            raise
        except ray.exceptions.GetTimeoutError as exc:
            raise StoreUnavailableError(f"store actor {self.namespace}/{ACTOR_NAME} did not answer in "
                                        f"{self.call_timeout_s:.0f}s", retryable=True) from exc
        except ray.exceptions.RayActorError as exc:
            self._forget()  # the next connect_cached() looks the (restarted) actor up again
            raise StoreUnavailableError(f"store actor {self.namespace}/{ACTOR_NAME} unavailable: {exc}",
                                        retryable=True) from exc

    def _notify(self, method: Any, *args: Any) -> None:
        """Fire-and-forget actor call (frees after a release); failures only cost memory until eviction."""
        try:
            method.remote(*args)
        except Exception:
            log.debug("store actor notification failed", exc_info=True)

    # -- pages ------------------------------------------------------------------------------
    @staticmethod
    def page_hashes(model_id: str, tenant: str, token_pages: list[list[int]]) -> list[str]:
        return page_hashes(model_id, tenant, token_pages)

    def has_pages(self, page_ids: list[str]) -> list[bool]:
        return self._call(self._actor.has_pages, validate_page_ids(page_ids))

    def put_pages(self, page_ids: list[str], tensors: list[torch.Tensor | PagePayload]) -> int:
        """Store pages (CPU tensors, any shape, or payloads already encoded, e.g. quantised KV by
        ``codec.encode_kv_quant``); existing ids are skipped. Returns pages added."""
        page_ids = validate_page_ids(page_ids)
        if not isinstance(tensors, (list, tuple)) or len(tensors) != len(page_ids):
            raise InvalidInputError(f"{len(page_ids)} page ids but "
                                    f"{len(tensors) if isinstance(tensors, (list, tuple)) else '?'} tensors")
        if any(not isinstance(t, (torch.Tensor, PagePayload)) for t in tensors):
            raise InvalidInputError("put_pages takes torch.Tensor (or PagePayload) pages")
        wanted = dict(zip(page_ids, tensors))  # a repeated id is stored once
        todo = self._call(self._actor.missing, list(wanted))
        payloads = [(p, wanted[p] if isinstance(wanted[p], PagePayload)  # validate all first
                     else encode_tensor(wanted[p], quantize=self.quantize)) for p in todo]
        added, chunk, size, pending = 0, [], 0, []
        for page_id, payload in payloads:
            chunk.append((page_id, payload))
            size += payload.nbytes
            if size >= _PUT_CHUNK_BYTES:
                pending.append(chunk)
                chunk, size = [], 0
        if chunk:
            pending.append(chunk)
        for part in pending:
            added += self._call(self._actor.put_pages, [p for p, _ in part], [x for _, x in part])
        return added

    def _get_pages(self, page_ids: list[str], copy: bool = False, quantized: bool = False
                   ) -> list[torch.Tensor | QuantKVPage]:
        refs = self._call(self._actor.get_refs, list(page_ids))
        missing = [p for p, r in zip(page_ids, refs) if r is None]
        if missing:
            raise PagesMissingError(missing)
        try:
            payloads: list[PagePayload] = ray.get(refs, timeout=self.call_timeout_s)
        except ray.exceptions.ObjectLostError as exc:  # owner died between the two calls
            raise StoreUnavailableError(f"pages lost with the store actor: {exc}", retryable=True) from exc
        if quantized:  # quantised KV pages as stored (views of the payload), the others decoded
            return [decode_kv_quant(p) if p.kind.startswith("kvq-") else decode_payload(p, copy=copy) for p in payloads]
        return [decode_payload(p, copy=copy) for p in payloads]

    def get_pages(self, page_ids: list[str], quantized: bool = False) -> list[torch.Tensor | QuantKVPage]:
        """Pages by id (decoded, zero-copy where possible) for a caller that holds them some other
        way (a :meth:`hold_pages` lease); ``PagesMissingError`` for any not stored. ``quantized``:
        quantised KV pages come back as stored (:class:`QuantKVPage`), as in ``ContextHandle.get_pages``."""
        return self._get_pages(validate_page_ids(page_ids), quantized=quantized)

    def hold_pages(self, hold_id: str, tenant: str, page_ids: list[str], holder_id: str, ttl_s: float) -> None:
        """Hold stored pages under a lease of ``ttl_s`` that no context owns: they are neither
        evicted nor freed until ``release(hold_id, holder_id)`` or the lease's expiry (the reaper),
        and are then freed unless a context lists them. What a prefill checkpoint keeps its pages by.

        Built from the directory's own rule rather than a new one: a record deleted while held
        lives until its last holder goes, and its pages count only that holder. So the hold is a
        record created, acquired and deleted at once; ``hold_id`` must be unused."""
        record = ContextRecord(context_id=hold_id, tenant=tenant, model_id="held-pages", dtype="none",
                               page_ids=list(page_ids), token_spans=[(0, 0)] * len(page_ids))
        self.create_context(record)  # PagesMissingError when one was evicted since its put
        try:
            self.directory.acquire(hold_id, tenant, holder_id, ttl_s)
        finally:
            self.delete_context(hold_id, tenant)  # without the lease (acquire failed) this frees them

    def refcount(self, page_id: str) -> int:
        return self.directory.refcount(page_id)

    def refcounts(self, page_ids: list[str]) -> list[int]:
        return self.directory.refcounts(list(page_ids))

    # -- contexts -----------------------------------------------------------------------------
    def create_context(self, record: ContextRecord, require_pages: bool = True) -> bool:
        """Register a context whose pages were put; True if new, False if identical exists."""
        if not isinstance(record, ContextRecord):
            raise InvalidInputError("create_context takes a ContextRecord")
        return self._call(self._actor.create_context, record.validate(), require_pages)

    def get_record(self, context_id: str, tenant: str) -> ContextRecord:
        """The directory entry without acquiring anything."""
        return self.directory.get_context(context_id, tenant)

    def list_contexts(self, tenant: str | None = None) -> list[str]:
        return self.directory.list_contexts(tenant)

    def open(self, context_id: str, tenant: str, holder_id: str | None = None,
             lease_ttl_s: float | None = None, auto_renew: bool = True) -> ContextHandle:
        """Acquire the context for a holder (a fresh one by default) and return its handle."""
        return ContextHandle.open(self, context_id, tenant, holder_id, lease_ttl_s, auto_renew)

    def holders(self, context_id: str) -> dict[str, float]:
        return self.directory.holders(context_id)

    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        return self._call(self._actor.delete_context, context_id, tenant)

    def _release(self, context_id: str, holder_id: str) -> bool:
        result = self.directory.release(context_id, holder_id)
        if result.freeable:
            self._notify(self._actor.free_pages, result.freeable)
        if result.context_removed:
            self._notify(self._actor.drop_blobs, context_id)
        return result.released

    def release(self, context_id: str, holder_id: str) -> bool:
        """Release by holder id (what a handle's close does); False for a double release."""
        return self._release(context_id, holder_id)

    def reap_expired(self) -> int:
        """Reclaim expired leases now (the actor also does this periodically); returns leases reaped."""
        return self._call(self._actor.reap).reaped

    # -- blobs -----------------------------------------------------------------------------------
    def put_blob(self, context_id: str, name: str, data: torch.Tensor | bytes, tenant: str | None = None) -> None:
        """Attach a tensor or bytes to a live context (freed with the context)."""
        validate_id(name, "blob name")
        if isinstance(data, torch.Tensor):
            payload = encode_tensor(data)
            meta = BlobMeta(name, "tensor", payload.nbytes, dtype_name(data.dtype), tuple(data.shape))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            payload = encode_bytes(data)
            meta = BlobMeta(name, "bytes", payload.nbytes)
        else:
            raise InvalidInputError(f"blob must be a tensor or bytes, got {type(data).__name__}")
        self._call(self._actor.put_blob, context_id, meta, payload, tenant)

    def get_blob(self, context_id: str, name: str, tenant: str | None = None,
                 copy: bool = False) -> torch.Tensor | bytes:
        _meta, ref = self._call(self._actor.get_blob_ref, context_id, name, tenant)
        try:
            payload = ray.get(ref, timeout=self.call_timeout_s)
        except (ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError) as exc:  # actor died meanwhile
            raise StoreUnavailableError(f"blob lost with the store actor: {exc}", retryable=True) from exc
        return decode_payload(payload, copy=copy)

    def missing_blobs(self, context_id: str, names: list[str]) -> list[str]:
        """Which of these blobs have no payload now (their metadata may still be listed)."""
        return self._call(self._actor.missing_blobs, context_id, list(names))

    def put_document(self, context_id: str, text: str, tenant: str | None = None) -> None:
        """Keep the document text in the directory: what a context is rebuilt from after a restart."""
        self.directory.put_document(context_id, text, tenant)

    def get_document(self, context_id: str, tenant: str | None = None) -> str:
        return self.directory.get_document(context_id, tenant)

    def put_checkpoint(self, key: str, tenant: str, value: str, ttl_s: float) -> None:
        """A note of the tenant's under ``key`` in the directory that expires after ``ttl_s``
        (a prefill checkpoint: serving/serve/checkpoint.py)."""
        self.directory.put_checkpoint(key, tenant, value, ttl_s)

    def get_checkpoint(self, key: str, tenant: str) -> str | None:
        return self.directory.get_checkpoint(key, tenant)

    def delete_checkpoint(self, key: str, tenant: str) -> bool:
        return self.directory.delete_checkpoint(key, tenant)

    # -- tiers, metrics, lifecycle -----------------------------------------------------------------
    def spill_context(self, context_id: str, tenant: str) -> dict[str, int]:
        """Write the context's pages and blobs under the spill dir (restorable after a Ray restart)."""
        return self._call(self._actor.spill_context, context_id, tenant)

    def restore_context(self, context_id: str, tenant: str) -> int:
        """Load the context's spilled pages back into the object store; returns its page count."""
        return self._call(self._actor.restore_context, context_id, tenant)

    def set_budget(self, budget_bytes: int) -> None:
        self._call(self._actor.set_budget, int(budget_bytes))

    def metrics(self, device_caches: list[Any] | None = None) -> dict[str, Any]:
        """Store metrics (see ``metrics.build_metrics``); ``device_caches`` adds ``tiers["device"]``."""
        out = self._call(self._actor.metrics)
        if device_caches:
            stats = [c.stats() for c in device_caches]
            out["tiers"]["device"] = {"caches": len(stats), "pages": sum(s["pages"] for s in stats),
                                      "bytes": sum(s["bytes"] for s in stats),
                                      "pinned": sum(s["pinned"] for s in stats),
                                      "hits": sum(s["hits"] for s in stats),
                                      "misses": sum(s["misses"] for s in stats),
                                      "evictions": sum(s["evictions"] for s in stats)}
        return out

    def ping(self, timeout_s: float = 2.0) -> None:
        """Both halves answer within ``timeout_s``: the directory (Redis) and the store actor;
        ``StoreUnavailableError`` otherwise (what a readiness probe asks)."""
        self.directory.ping()
        try:
            ray.get(self._actor.info.remote(), timeout=timeout_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
            raise StoreUnavailableError(f"store actor {self.namespace}/{ACTOR_NAME} did not answer: "
                                        f"{type(exc).__name__}", retryable=True) from None

    def info(self) -> dict[str, Any]:
        """The running actor's config, pid and directory backend."""
        return self._call(self._actor.info)

    def _forget(self) -> None:
        with self._cache_lock:
            for key in [k for k, v in self._cache.items() if v is self]:
                del self._cache[key]

    def shutdown(self, kill_actor: bool = False) -> None:
        """Close this client; with ``kill_actor`` also end the store actor (its pages are freed)."""
        self._forget()
        if kill_actor:
            try:
                ray.get(self._actor.shutdown.remote(), timeout=10)
            except Exception:
                log.debug("store actor shutdown call failed", exc_info=True)
            ray.kill(self._actor, no_restart=True)
        self.directory.close()
