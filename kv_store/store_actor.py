"""The detached store actor: owner of every page and blob in the object store.

Pages are ``ray.put`` *inside* this actor so the actor is their owner: Ray
keeps an object alive as long as its owner lives, so an agent that dies never
takes pages with it. Readers receive the ObjectRefs (borrowing them) and map
the bytes zero-copy. The actor is created ``lifetime="detached"`` and named, so
it outlives the driver that started it and every process finds it by name.

The actor is the authority on *which pages are in the host tier*; the
directory (Redis, or an in-process one hosted here when no Redis is
configured) is the authority on contexts, refcounts and leases. Mutations of
the page table run under one lock; evictions and frees are confirmed against
the directory atomically at the moment they happen (see ``directory.py``).

A background thread reaps expired holder leases every ``reap_interval_s``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import ray

from .codec import PagePayload
from .directories import make_directory
from .directory import Directory
from .errors import BlobNotFoundError, InvalidInputError, PagesMissingError, StoreUnavailableError
from .metrics import StoreCounters, build_metrics
from .records import BlobMeta, ContextRecord, DeleteResult, ReapResult, validate_page_ids
from .spill import SpillStore

__all__ = ["StoreConfig", "KVStoreActor", "DIRECTORY_METHODS"]

log = logging.getLogger(__name__)

#: Directory methods the facade may call through the actor when the directory lives here.
DIRECTORY_METHODS = frozenset({
    "ping", "get_context", "list_contexts", "acquire", "renew", "release", "holders",
    "refcounts", "context_refs", "claim_free", "claim_evict", "put_blob_meta", "get_blob_meta",
    "list_blobs", "stats", "put_document", "get_document", "put_checkpoint", "get_checkpoint", "delete_checkpoint",
})


@dataclass(frozen=True)
class StoreConfig:
    """What the store actor is started with; a later ``connect`` must agree on the directory."""

    namespace: str
    redis_url: str | None
    budget_bytes: int
    spill_dir: str
    spill_on_evict: bool = False
    reap_interval_s: float = 5.0


@dataclass
class _Entry:
    ref: ray.ObjectRef
    nbytes: int


class KVStoreActor:
    """Page table + blob table + eviction + reaping. Wrapped with ``ray.remote`` by :mod:`store`."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.directory: Directory = make_directory(config.redis_url, config.namespace, warn=False)
        self.budget_bytes = int(config.budget_bytes)
        self.spill = SpillStore(config.spill_dir)
        self.counters = StoreCounters()
        self._lock = threading.RLock()
        self._pages: OrderedDict[str, _Entry] = OrderedDict()  # oldest (LRU) first
        self._host_bytes = 0
        self._blobs: dict[tuple[str, str], _Entry] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="kv-reaper", daemon=True)
        self._reaper.start()

    # -- introspection ----------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {"config": self.config, "pid": os.getpid(), "budget_bytes": self.budget_bytes,
                "backend": self.directory.backend}

    def set_budget(self, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise InvalidInputError("budget_bytes must be positive")
        with self._lock:
            self.budget_bytes = int(budget_bytes)
            self._evict_to_budget()

    def dir_call(self, method: str, *args: Any) -> Any:
        """Directory access for facades when the directory is hosted in this actor."""
        if method not in DIRECTORY_METHODS:
            raise InvalidInputError(f"directory method {method!r} not allowed through the actor")
        return getattr(self.directory, method)(*args)

    # -- pages ----------------------------------------------------------------------------
    def missing(self, page_ids: list[str]) -> list[str]:
        """Ids not in the host tier (the facade ships only those on put)."""
        with self._lock:
            return [p for p in page_ids if p not in self._pages]

    def has_pages(self, page_ids: list[str]) -> list[bool]:
        """Readable now: in the host tier, or spilled to disk (restored on read)."""
        with self._lock:
            return [p in self._pages or self.spill.has_page(p) for p in page_ids]

    def page_sizes(self, page_ids: list[str]) -> list[int | None]:
        with self._lock:
            return [self._pages[p].nbytes if p in self._pages else None for p in page_ids]

    def _store_page(self, page_id: str, payload: PagePayload) -> None:
        entry = _Entry(ray.put(payload), payload.nbytes)
        self._pages[page_id] = entry
        self._host_bytes += entry.nbytes

    def put_pages(self, page_ids: list[str], payloads: list[PagePayload]) -> int:
        """Store pages not yet present (idempotent); returns how many were new."""
        page_ids = validate_page_ids(page_ids)
        if len(page_ids) != len(payloads) or not all(isinstance(p, PagePayload) for p in payloads):
            raise InvalidInputError("put_pages needs one PagePayload per page id")
        new = 0
        with self._lock:
            for page_id, payload in zip(page_ids, payloads):
                if page_id in self._pages:
                    self._pages.move_to_end(page_id)
                    self.counters.put_dedup += 1
                    continue
                self._store_page(page_id, payload)
                new += 1
            self.counters.puts += new
            self._evict_to_budget()
        return new

    def get_refs(self, page_ids: list[str]) -> list[ray.ObjectRef | None]:
        """ObjectRefs of the pages (None where missing); reloads spilled pages on a miss."""
        out: list[ray.ObjectRef | None] = []
        with self._lock:
            restored = False
            for page_id in page_ids:
                entry = self._pages.get(page_id)
                if entry is not None:
                    self._pages.move_to_end(page_id)
                    self.counters.hits += 1
                    out.append(entry.ref)
                    continue
                self.counters.misses += 1
                payload = self.spill.read_page(page_id)
                if payload is None:
                    out.append(None)
                    continue
                self._store_page(page_id, payload)
                self.counters.restores += 1
                restored = True
                out.append(self._pages[page_id].ref)
            if restored:
                self._evict_to_budget()
        return out

    def _evict_to_budget(self) -> None:
        # Called with the lock held. Walk LRU-first; the directory confirms rc == 0
        # at this instant for each batch, so a page someone holds is never dropped.
        if self._host_bytes <= self.budget_bytes:
            return
        order = list(self._pages)
        for start in range(0, len(order), 256):
            if self._host_bytes <= self.budget_bytes:
                break
            batch = order[start:start + 256]
            try:
                evictable = set(self.directory.claim_evict(batch))
            except StoreUnavailableError as exc:
                # Without the directory we can't prove a page is unheld, so evict nothing;
                # the put that got us here still succeeded, and the next put retries.
                log.warning("eviction skipped, directory unavailable: %s", exc)
                break
            for page_id in batch:
                if self._host_bytes <= self.budget_bytes:
                    break
                if page_id in evictable and page_id in self._pages:
                    if self.config.spill_on_evict:
                        self._spill_page(page_id)
                    self._drop(page_id)
                    self.counters.evictions += 1
        if self._host_bytes > self.budget_bytes:
            self.counters.over_budget_events += 1
            log.warning("host tier at %d bytes over a %d budget: every remaining page is held",
                        self._host_bytes, self.budget_bytes)

    def _drop(self, page_id: str) -> None:
        entry = self._pages.pop(page_id, None)
        if entry is not None:
            self._host_bytes -= entry.nbytes  # Ray frees the object once readers drop their borrows

    def free_pages(self, page_ids: list[str]) -> int:
        """Drop pages that no context and no holder uses (re-confirmed atomically)."""
        if not page_ids:
            return 0
        with self._lock:
            confirmed = self.directory.claim_free(list(page_ids))
            for page_id in confirmed:
                self._drop(page_id)
                self.spill.remove_page(page_id)
            self.counters.frees += len(confirmed)
            return len(confirmed)

    # -- contexts (routed here so create/delete serialise with frees and evictions) ------------
    def create_context(self, record: ContextRecord, require_pages: bool = True) -> bool:
        record = record.validate()
        with self._lock:
            uniq = record.unique_page_ids
            missing = [p for p in uniq if p not in self._pages and not self.spill.has_page(p)]
            if missing and require_pages:
                raise PagesMissingError(missing, f"create_context {record.context_id!r}: "
                                                 f"{len(missing)} page(s) were never put (or were evicted)")
            if not record.page_bytes:
                sizes = {p: e.nbytes for p, e in self._pages.items() if p in set(uniq)}
                record = replace(record, page_bytes=[sizes.get(p, 0) for p in record.page_ids])
            return self.directory.create_context(record)

    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        with self._lock:
            result = self.directory.delete_context(context_id, tenant)
            self.free_pages(result.freeable)
            if result.context_removed:
                self.drop_blobs(context_id)
            return result

    def drop_blobs(self, context_id: str) -> None:
        with self._lock:
            for key in [k for k in self._blobs if k[0] == context_id]:
                del self._blobs[key]
            self.spill.remove_blobs(context_id)

    def reap(self) -> ReapResult:
        """Release expired leases, free what that orphaned; called by the thread and by tests."""
        with self._lock:
            result = self.directory.reap_expired()
            self.counters.reaped_leases += result.reaped
            self.free_pages(result.freeable)
            for context_id in result.removed_contexts:
                self.drop_blobs(context_id)
            return result

    def _reap_loop(self) -> None:
        while not self._stop.wait(self.config.reap_interval_s):
            try:
                result = self.reap()
                if result.reaped:
                    log.info("reaped %d expired lease(s), freed %d page(s)", result.reaped, len(result.freeable))
            except StoreUnavailableError as exc:
                log.warning("lease reaper: directory unavailable (%s); will retry", exc)
            except Exception:  # keep the reaper alive whatever one round hits
                log.exception("lease reaper round failed")

    # -- blobs ----------------------------------------------------------------------------------
    def put_blob(self, context_id: str, meta: BlobMeta, payload: PagePayload, tenant: str | None) -> None:
        with self._lock:
            self.directory.put_blob_meta(context_id, meta, tenant)  # raises if the context is gone
            self._blobs[(context_id, meta.name)] = _Entry(ray.put(payload), payload.nbytes)

    def get_blob_ref(self, context_id: str, name: str, tenant: str | None) -> tuple[BlobMeta, ray.ObjectRef]:
        meta = self.directory.get_blob_meta(context_id, name, tenant)
        with self._lock:
            entry = self._blobs.get((context_id, name))
            if entry is None:
                payload = self.spill.read_blob(context_id, name)
                if payload is None:
                    raise BlobNotFoundError(f"blob {name!r} of context {context_id!r} was lost "
                                            "(store actor restarted without a spill)")
                entry = self._blobs[(context_id, name)] = _Entry(ray.put(payload), payload.nbytes)
            return meta, entry.ref

    def missing_blobs(self, context_id: str, names: list[str]) -> list[str]:
        """Names whose payload is neither in memory nor spilled (lost with an earlier store actor)."""
        with self._lock:
            return [n for n in names if (context_id, n) not in self._blobs
                    and not self.spill.blob_path(context_id, n).exists()]

    # -- disk tier ------------------------------------------------------------------------------
    def _spill_page(self, page_id: str) -> int:
        entry = self._pages.get(page_id)
        if entry is None or self.spill.has_page(page_id):
            return 0
        self.counters.spilled += 1
        return self.spill.write_page(page_id, ray.get(entry.ref))

    def spill_context(self, context_id: str, tenant: str) -> dict[str, int]:
        """Write the context's pages and blobs to disk so a new store actor can reload them."""
        record = self.directory.get_context(context_id, tenant)
        written = nbytes = 0
        with self._lock:
            missing = [p for p in record.unique_page_ids if p not in self._pages and not self.spill.has_page(p)]
            if missing:
                raise PagesMissingError(missing, f"cannot spill {context_id!r}: pages not in the store")
            for page_id in record.unique_page_ids:
                n = self._spill_page(page_id)
                written += bool(n)
                nbytes += n
            for (cid, name), entry in self._blobs.items():
                if cid == context_id:
                    nbytes += self.spill.write_blob(cid, name, ray.get(entry.ref))
        return {"pages_written": written, "bytes_written": nbytes, "pages": len(record.unique_page_ids)}

    def restore_context(self, context_id: str, tenant: str) -> int:
        """Reload every spilled page of the context into the host tier; returns pages loaded."""
        record = self.directory.get_context(context_id, tenant)
        refs = self.get_refs(record.unique_page_ids)
        missing = [p for p, r in zip(record.unique_page_ids, refs) if r is None]
        if missing:
            raise PagesMissingError(missing, f"context {context_id!r}: pages neither in memory nor on disk")
        return len(refs)

    # -- metrics / lifecycle --------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        with self._lock:
            page_ids = list(self._pages)
            host_bytes = self._host_bytes
            blob_count, blob_bytes = len(self._blobs), sum(e.nbytes for e in self._blobs.values())
            counters = replace(self.counters)
        return build_metrics(counters, host_pages=len(page_ids), host_bytes=host_bytes,
                             budget_bytes=self.budget_bytes, blob_count=blob_count, blob_bytes=blob_bytes,
                             refcounts=self.directory.refcounts(page_ids), directory=self.directory.stats(),
                             disk=self.spill.usage(), backend=self.directory.backend)

    def shutdown(self) -> None:
        self._stop.set()
        self.directory.close()
