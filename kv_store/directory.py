"""The directory interface and its in-process implementation.

The directory is the store's source of truth for everything except the page
bytes themselves: which contexts exist (and their page lists, spans, model,
dtype, tenant, sizes), per-page refcounts, holder leases and blob metadata.

Refcount model (the same in every backend):

* ``rc`` — holder references. ``acquire(context, holder)`` adds 1 to each of
  the context's distinct pages, once per (context, holder) pair, and records a
  lease that expires ``ttl_s`` later unless renewed. ``release`` subtracts 1.
  A page with ``rc > 0`` is never evicted. ``rc`` never goes below 0: releasing
  a lease that isn't held is a logged no-op.
* ``ctx`` — how many live contexts list the page. ``delete_context`` subtracts 1.

A page whose ``rc`` and ``ctx`` are both 0 is *freeable*: no handle reads it and
no context needs it, so "when the last reference to a context is dropped, its
KV is freed" — the store frees such pages right away rather than leaving them
to the LRU. Pages with ``rc == 0`` but ``ctx > 0`` are merely *evictable*: kept
while the byte budget allows, dropped LRU-first when it doesn't.

Freeing and evicting are confirmed atomically (:meth:`Directory.claim_free`,
:meth:`Directory.claim_evict`) at the moment the store acts, because a
concurrent acquire or create may have taken a new reference since the page
was reported freeable.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .errors import BlobNotFoundError, ContextExistsError, ContextNotFoundError, InvalidInputError
from .records import BlobMeta, ContextRecord, DeleteResult, ReapResult, ReleaseResult, validate_id

__all__ = ["Directory", "InProcessDirectory", "NO_REDIS_WARNING"]

log = logging.getLogger(__name__)

NO_REDIS_WARNING = "no AGENTCTX_REDIS_URL: using in-process directory (not shared across processes)"


class Directory(ABC):
    """What the store needs from a directory backend; see the module docstring for semantics."""

    backend: str = "abstract"

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` if the backend can't be reached."""

    # -- contexts ---------------------------------------------------------------
    @abstractmethod
    def create_context(self, record: ContextRecord) -> bool:
        """Store a validated record; True if created, False if an identical one exists."""

    @abstractmethod
    def get_context(self, context_id: str, tenant: str) -> ContextRecord:
        """The live record, or :class:`ContextNotFoundError` (also for a wrong tenant)."""

    @abstractmethod
    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        """Drop the context's ``ctx`` references; the record goes once no holder remains."""

    @abstractmethod
    def list_contexts(self, tenant: str | None = None) -> list[str]:
        """Live context ids, optionally of one tenant."""

    # -- holder leases ------------------------------------------------------------
    @abstractmethod
    def acquire(self, context_id: str, tenant: str, holder_id: str, ttl_s: float) -> ContextRecord:
        """Take (or renew) the holder's reference on the context's pages."""

    @abstractmethod
    def renew(self, context_id: str, holder_id: str, ttl_s: float) -> bool:
        """Push the lease expiry out; False if the lease no longer exists (expired and reaped)."""

    @abstractmethod
    def release(self, context_id: str, holder_id: str) -> ReleaseResult:
        """Drop the holder's reference; a second release is a no-op (``released=False``)."""

    @abstractmethod
    def reap_expired(self, limit: int = 10_000) -> ReapResult:
        """Release every lease whose expiry has passed (a dead holder's references)."""

    @abstractmethod
    def holders(self, context_id: str) -> dict[str, float]:
        """holder id -> seconds until its lease expires (negative: expired, not yet reaped)."""

    # -- pages ------------------------------------------------------------------------
    @abstractmethod
    def refcounts(self, page_ids: list[str]) -> list[int]:
        """Holder refcount of each page (0 for unknown pages)."""

    @abstractmethod
    def context_refs(self, page_ids: list[str]) -> list[int]:
        """Number of live contexts listing each page."""

    @abstractmethod
    def claim_free(self, page_ids: list[str]) -> list[str]:
        """Atomically keep those with rc == ctx == 0, forget their counters, return them."""

    @abstractmethod
    def claim_evict(self, page_ids: list[str]) -> list[str]:
        """Atomically return those with rc == 0 at this instant (safe to evict)."""

    def refcount(self, page_id: str) -> int:
        return self.refcounts([page_id])[0]

    # -- blobs ------------------------------------------------------------------------
    @abstractmethod
    def put_blob_meta(self, context_id: str, meta: BlobMeta, tenant: str | None = None) -> None:
        """Record a blob on a live context (tenant checked when given)."""

    @abstractmethod
    def get_blob_meta(self, context_id: str, name: str, tenant: str | None = None) -> BlobMeta:
        """Blob metadata or :class:`BlobNotFoundError` / :class:`ContextNotFoundError`."""

    @abstractmethod
    def list_blobs(self, context_id: str) -> list[BlobMeta]:
        """Blobs of a context (empty when none or unknown)."""

    # -- the durable document ----------------------------------------------------------
    # Pages and blobs live in the object store and die with the store actor; the directory
    # outlives it (Redis with AOF), so it keeps the one thing a context can be rebuilt from.
    @abstractmethod
    def put_document(self, context_id: str, text: str, tenant: str | None = None) -> None:
        """Keep the document text of a live context (freed with the context)."""

    @abstractmethod
    def get_document(self, context_id: str, tenant: str | None = None) -> str:
        """The kept text, or :class:`BlobNotFoundError` / :class:`ContextNotFoundError`."""

    # -- prefill checkpoints ------------------------------------------------------------
    # A prefill in progress notes how far it got (serving/serve/checkpoint.py), so that a restart
    # resumes it. The note is opaque here; it expires after ``ttl_s`` unless written again, like
    # the lease that holds the pages it names (KVStore.hold_pages).
    @abstractmethod
    def put_checkpoint(self, key: str, tenant: str, value: str, ttl_s: float) -> None:
        """Write (or overwrite) the tenant's note under ``key``; it expires ``ttl_s`` later."""

    @abstractmethod
    def get_checkpoint(self, key: str, tenant: str) -> str | None:
        """The tenant's live note under ``key``, or None (never written, deleted or expired)."""

    @abstractmethod
    def delete_checkpoint(self, key: str, tenant: str) -> bool:
        """Drop the note; False when there was none."""

    # -- bookkeeping ------------------------------------------------------------------
    @abstractmethod
    def stats(self) -> dict[str, int]:
        """``{"contexts": live contexts, "leases": live leases, "negative_clamps": must stay 0}``."""

    def close(self) -> None:
        """Release client resources (connections); the stored state is untouched."""
        return None  # nothing to release unless a backend holds connections


@dataclass
class _Ctx:
    record: ContextRecord
    holders: dict[str, float] = field(default_factory=dict)  # holder -> expiry (clock seconds)
    blobs: dict[str, BlobMeta] = field(default_factory=dict)
    document: str | None = None
    deleted: bool = False


class InProcessDirectory(Directory):
    """Dict-backed directory guarded by one lock (the lock plays the role of Lua atomicity).

    Only this process sees it: the store hosts it inside the store actor so
    that every Ray process talking to that actor shares it, but it is not
    durable and not visible to another Ray cluster.
    """

    backend = "inprocess"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._contexts: dict[str, _Ctx] = {}
        self._pages: dict[str, list[int]] = {}  # page -> [rc, ctx]
        self._checkpoints: dict[tuple[str, str], tuple[str, float]] = {}  # (tenant, key) -> (note, expiry)
        self.negative_clamps = 0

    def ping(self) -> None:
        return None

    def _live(self, context_id: str, tenant: str | None) -> _Ctx:
        entry = self._contexts.get(context_id)
        if entry is None or entry.deleted or (tenant is not None and entry.record.tenant != tenant):
            raise ContextNotFoundError(context_id)
        return entry

    def create_context(self, record: ContextRecord) -> bool:
        record = record.validate()
        with self._lock:
            existing = self._contexts.get(record.context_id)
            if existing is not None:
                if existing.deleted:
                    raise ContextExistsError(f"context {record.context_id!r} is being deleted; retry later",
                                             retryable=True)
                if existing.record.same_content(record):
                    return False
                raise ContextExistsError(f"context id {record.context_id!r} is taken")
            created = record.created_at or time.time()
            self._contexts[record.context_id] = _Ctx(record=replace(record, created_at=created))
            for page in record.unique_page_ids:
                self._pages.setdefault(page, [0, 0])[1] += 1
            return True

    def get_context(self, context_id: str, tenant: str) -> ContextRecord:
        with self._lock:
            return replace(self._live(context_id, tenant).record)

    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        with self._lock:
            entry = self._live(context_id, tenant)
            freeable = []
            for page in entry.record.unique_page_ids:
                counts = self._pages.setdefault(page, [0, 0])
                counts[1] = max(0, counts[1] - 1)
                if counts == [0, 0]:
                    freeable.append(page)
            if entry.holders:
                entry.deleted = True
                return DeleteResult(freeable, context_removed=False, holders=len(entry.holders))
            del self._contexts[context_id]
            return DeleteResult(freeable, context_removed=True, holders=0)

    def list_contexts(self, tenant: str | None = None) -> list[str]:
        with self._lock:
            return sorted(c for c, e in self._contexts.items()
                          if not e.deleted and (tenant is None or e.record.tenant == tenant))

    def acquire(self, context_id: str, tenant: str, holder_id: str, ttl_s: float) -> ContextRecord:
        validate_id(holder_id, "holder_id")
        _check_ttl(ttl_s)
        with self._lock:
            entry = self._live(context_id, tenant)
            if holder_id not in entry.holders:
                for page in entry.record.unique_page_ids:
                    self._pages.setdefault(page, [0, 0])[0] += 1
            entry.holders[holder_id] = self._clock() + ttl_s
            return replace(entry.record)

    def renew(self, context_id: str, holder_id: str, ttl_s: float) -> bool:
        _check_ttl(ttl_s)
        with self._lock:
            entry = self._contexts.get(context_id)
            if entry is None or holder_id not in entry.holders:
                return False
            entry.holders[holder_id] = self._clock() + ttl_s
            return True

    def _release_locked(self, context_id: str, holder_id: str) -> ReleaseResult:
        entry = self._contexts.get(context_id)
        if entry is None or entry.holders.pop(holder_id, None) is None:
            return ReleaseResult(released=False)
        freeable = []
        for page in entry.record.unique_page_ids:
            counts = self._pages.setdefault(page, [0, 0])
            counts[0] -= 1
            if counts[0] < 0:  # cannot happen with consistent bookkeeping; never store it
                counts[0] = 0
                self.negative_clamps += 1
                log.warning("refcount of page %s would go negative; clamped to 0", page[:12])
            if counts == [0, 0]:
                freeable.append(page)
        removed = entry.deleted and not entry.holders
        if removed:
            del self._contexts[context_id]
        return ReleaseResult(True, freeable, removed)

    def release(self, context_id: str, holder_id: str) -> ReleaseResult:
        with self._lock:
            result = self._release_locked(context_id, holder_id)
        if not result.released:
            log.warning("release of context %r by holder %r: not held (double release?); ignored",
                        context_id, holder_id)
        return result

    def reap_expired(self, limit: int = 10_000) -> ReapResult:
        out = ReapResult()
        with self._lock:
            now = self._clock()
            expired = [(c, h) for c, e in self._contexts.items() for h, t in e.holders.items() if t <= now]
            for context_id, holder_id in expired[:limit]:
                result = self._release_locked(context_id, holder_id)
                out.reaped += int(result.released)
                out.freeable.extend(result.freeable)
                if result.context_removed:
                    out.removed_contexts.append(context_id)
        return out

    def holders(self, context_id: str) -> dict[str, float]:
        with self._lock:
            entry = self._contexts.get(context_id)
            now = self._clock()
            return {h: t - now for h, t in entry.holders.items()} if entry else {}

    def refcounts(self, page_ids: list[str]) -> list[int]:
        with self._lock:
            return [self._pages.get(p, [0, 0])[0] for p in page_ids]

    def context_refs(self, page_ids: list[str]) -> list[int]:
        with self._lock:
            return [self._pages.get(p, [0, 0])[1] for p in page_ids]

    def claim_free(self, page_ids: list[str]) -> list[str]:
        with self._lock:
            out = [p for p in dict.fromkeys(page_ids) if self._pages.get(p, [0, 0]) == [0, 0]]
            for p in out:
                self._pages.pop(p, None)
            return out

    def claim_evict(self, page_ids: list[str]) -> list[str]:
        with self._lock:
            return [p for p in dict.fromkeys(page_ids) if self._pages.get(p, [0, 0])[0] == 0]

    def put_blob_meta(self, context_id: str, meta: BlobMeta, tenant: str | None = None) -> None:
        validate_id(meta.name, "blob name")
        with self._lock:
            self._live(context_id, tenant).blobs[meta.name] = meta

    def get_blob_meta(self, context_id: str, name: str, tenant: str | None = None) -> BlobMeta:
        with self._lock:
            meta = self._live(context_id, tenant).blobs.get(name)
            if meta is None:
                raise BlobNotFoundError(f"context {context_id!r} has no blob {name!r}")
            return meta

    def put_document(self, context_id: str, text: str, tenant: str | None = None) -> None:
        with self._lock:
            self._live(context_id, tenant).document = str(text)

    def get_document(self, context_id: str, tenant: str | None = None) -> str:
        with self._lock:
            text = self._live(context_id, tenant).document
            if text is None:
                raise BlobNotFoundError(f"context {context_id!r} has no stored document")
            return text

    def list_blobs(self, context_id: str) -> list[BlobMeta]:
        with self._lock:
            entry = self._contexts.get(context_id)
            return list(entry.blobs.values()) if entry and not entry.deleted else []

    def put_checkpoint(self, key: str, tenant: str, value: str, ttl_s: float) -> None:
        validate_id(key, "checkpoint key")
        validate_id(tenant, "tenant")
        _check_ttl(ttl_s)
        with self._lock:
            self._checkpoints[(tenant, key)] = (str(value), self._clock() + ttl_s)

    def get_checkpoint(self, key: str, tenant: str) -> str | None:
        with self._lock:
            value, expiry = self._checkpoints.get((tenant, key), (None, 0.0))
            if value is not None and expiry <= self._clock():
                del self._checkpoints[(tenant, key)]
                return None
            return value

    def delete_checkpoint(self, key: str, tenant: str) -> bool:
        with self._lock:
            live = self.get_checkpoint(key, tenant) is not None
            self._checkpoints.pop((tenant, key), None)
            return live

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"contexts": sum(not e.deleted for e in self._contexts.values()),
                    "leases": sum(len(e.holders) for e in self._contexts.values()),
                    "negative_clamps": self.negative_clamps}


def _check_ttl(ttl_s: float) -> None:
    if not isinstance(ttl_s, (int, float)) or not 0 < ttl_s <= 86_400:
        raise InvalidInputError(f"lease ttl must be in (0, 86400] seconds, got {ttl_s!r}")
