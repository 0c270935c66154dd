"""ContextHandle: one holder's reference on a context, kept alive by a lease.

Opening a handle acquires the context (refcount +1 on each page, lease with a
TTL); a per-process background thread renews every live handle's lease at a
third of its TTL; ``close()`` / ``with`` exit / garbage collection release it.
If the process dies, renewals stop and the store actor's reaper releases the
references once the lease expires — that is how a crashed agent's pages get
reclaimed without anyone noticing the crash.

Handles travel by id: pickling a handle (e.g. passing it to a Ray actor)
re-attaches in the receiving process with a fresh holder id, i.e. the receiver
holds its own reference for as long as it keeps the handle.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import weakref
from typing import Any, Protocol

import torch

from .codec import QuantKVPage
from .directory import Directory
from .errors import ContextNotFoundError, PageNotInContextError, StoreError
from .records import ContextRecord

__all__ = ["ContextHandle", "HandleStore", "LeaseRenewer", "new_holder_id"]

log = logging.getLogger(__name__)


def new_holder_id() -> str:
    """Unique per handle; host and pid make leases traceable when debugging."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


class HandleStore(Protocol):
    """What a handle needs of its store (:class:`~agentctx.kv_store.store.KVStore` is the one)."""

    directory: Directory
    redis_url: str
    namespace: str
    lease_ttl_s: float

    @classmethod
    def attach(cls, context_id: str, tenant: str, redis_url: str | None = None, namespace: str = "agentctx",
               holder_id: str | None = None, lease_ttl_s: float | None = None) -> "ContextHandle": ...
    def _get_pages(self, page_ids: list[str], copy: bool = False) -> list[torch.Tensor]: ...
    def get_blob(self, context_id: str, name: str, tenant: str | None = None,
                 copy: bool = False) -> torch.Tensor | bytes: ...
    def _release(self, context_id: str, holder_id: str) -> bool: ...


def _release(store: HandleStore, context_id: str, holder_id: str) -> None:
    # Runs from close(), from the GC finalizer or at interpreter exit: never raise.
    try:
        store._release(context_id, holder_id)
    except StoreError as exc:
        log.warning("release of %r by %s failed (%s); the lease expires and is reaped", context_id, holder_id, exc)
    except Exception:  # interpreter shutdown, Ray already gone
        log.debug("release of %r by %s failed at shutdown", context_id, holder_id, exc_info=True)


class ContextHandle:
    """A held context: ``record``, ``get_pages()``, ``get_blob()``, ``close()``."""

    def __init__(self, store: HandleStore, record: ContextRecord, holder_id: str, lease_ttl_s: float,
                 auto_renew: bool = True) -> None:
        self._store = store
        self.record = record
        self.holder_id = holder_id
        self.lease_ttl_s = float(lease_ttl_s)
        self.lease_lost = False
        self._page_set = frozenset(record.page_ids)
        self._next_renew = time.monotonic() + self.lease_ttl_s / 3
        # The finalizer must not reference self, or the handle could never be collected.
        self._finalizer = weakref.finalize(self, _release, store, record.context_id, holder_id)
        if auto_renew:
            LeaseRenewer.instance().register(self)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def open(cls, store: HandleStore, context_id: str, tenant: str, holder_id: str | None = None,
             lease_ttl_s: float | None = None, auto_renew: bool = True) -> "ContextHandle":
        ttl = float(lease_ttl_s or store.lease_ttl_s)
        holder = holder_id or new_holder_id()
        record = store.directory.acquire(context_id, tenant, holder, ttl)
        return cls(store, record, holder, ttl, auto_renew)

    def __reduce__(self):
        # Re-attached by id in the receiving process, through its own store client.
        return (type(self._store).attach, (self.context_id, self.tenant, self._store.redis_url,
                                           self._store.namespace, None, self.lease_ttl_s))

    # -- accessors ----------------------------------------------------------------------
    @property
    def context_id(self) -> str:
        return self.record.context_id

    @property
    def tenant(self) -> str:
        return self.record.tenant

    @property
    def page_ids(self) -> list[str]:
        return list(self.record.page_ids)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _check_open(self) -> None:
        if self.closed:
            raise ContextNotFoundError(self.context_id) from ValueError("handle is closed")
        if self.lease_lost:
            raise ContextNotFoundError(self.context_id) from ValueError("lease lost and context gone")

    def get_pages(self, page_ids: list[str] | None = None, copy: bool = False, quantized: bool = False
                  ) -> list[torch.Tensor | QuantKVPage]:
        """The pages' tensors (all of the context's pages by default), in the order asked.

        Without ``copy`` the tensors are views of the one shared copy in the
        object store: **never modify them in place** — torch has no read-only
        tensors, and a write would change the page for every agent on the node.
        Pass ``copy=True`` for private, writable tensors. ``quantized``: quantised KV pages
        (``model.kv_dtype`` fp8_e4m3 / int8) come back as :class:`~.codec.QuantKVPage`, values and
        scales as stored (views, read-only likewise), not dequantised.
        Raises :class:`PagesMissingError` for evicted/lost pages and
        :class:`PageNotInContextError` for ids outside this context.
        """
        self._check_open()
        ids = self.page_ids if page_ids is None else list(page_ids)
        foreign = [p for p in ids if p not in self._page_set]
        if foreign:
            raise PageNotInContextError(f"{len(foreign)} requested page(s) are not in context {self.context_id!r}")
        return self._store._get_pages(ids, copy=copy, quantized=quantized)

    def get_blob(self, name: str, copy: bool = False) -> torch.Tensor | bytes:
        self._check_open()
        return self._store.get_blob(self.context_id, name, tenant=self.tenant, copy=copy)

    # -- lease ------------------------------------------------------------------------------
    def renew(self) -> bool:
        """Extend the lease; re-acquire if it had expired and been reaped. False if the context is gone."""
        if self.closed or self.lease_lost:
            return False
        self._next_renew = time.monotonic() + self.lease_ttl_s / 3
        if self._store.directory.renew(self.context_id, self.holder_id, self.lease_ttl_s):
            return True
        log.warning("lease of holder %s on %r had expired and was reaped; re-acquiring "
                    "(pages may have been evicted meanwhile)", self.holder_id, self.context_id)
        try:
            self._store.directory.acquire(self.context_id, self.tenant, self.holder_id, self.lease_ttl_s)
            return True
        except ContextNotFoundError:
            self.lease_lost = True
            return False

    def close(self) -> None:
        """Release this holder's references (idempotent)."""
        LeaseRenewer.instance().unregister(self)
        self._finalizer()

    def __enter__(self) -> "ContextHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"ContextHandle({self.context_id!r}, tenant={self.tenant!r}, holder={self.holder_id!r}, {state})"


class LeaseRenewer:
    """One daemon thread per process renewing every registered handle (weakly referenced)."""

    _instance: "LeaseRenewer | None" = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._handles: "weakref.WeakSet[ContextHandle]" = weakref.WeakSet()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="kv-lease-renewer", daemon=True)
        self._thread.start()

    @classmethod
    def instance(cls) -> "LeaseRenewer":
        with cls._instance_lock:
            if cls._instance is None or not cls._instance._thread.is_alive():
                cls._instance = cls()
            return cls._instance

    def register(self, handle: ContextHandle) -> None:
        with self._cond:
            self._handles.add(handle)
            self._cond.notify()

    def unregister(self, handle: ContextHandle) -> None:
        with self._cond:
            self._handles.discard(handle)

    def _due(self) -> tuple[list[ContextHandle], float]:
        """Handles whose renewal is due, and how long until the next one is.

        A separate function so no loop variable keeps a handle alive while the
        thread waits: an idle handle must stay collectable (GC releases it).
        """
        now = time.monotonic()
        due, wait = [], 1.0
        for handle in list(self._handles):
            if handle._next_renew <= now:
                due.append(handle)
            else:
                wait = min(wait, handle._next_renew - now)
        return due, wait

    def _renew_all(self, due: list[ContextHandle]) -> None:
        for handle in due:
            try:
                if not handle.renew():
                    self.unregister(handle)
            except StoreError as exc:
                # Directory briefly down: try again soon; the TTL gives us slack.
                handle._next_renew = time.monotonic() + min(1.0, handle.lease_ttl_s / 6)
                log.warning("lease renewal for %r failed: %s", handle.context_id, exc)
            except Exception:
                handle._next_renew = time.monotonic() + 1.0
                log.exception("lease renewal for %r failed", handle.context_id)

    def _loop(self) -> None:
        while True:
            with self._cond:
                due, wait = self._due()
                if not due:
                    self._cond.wait(timeout=max(0.02, wait))
                    continue
            self._renew_all(due)
            due = []
