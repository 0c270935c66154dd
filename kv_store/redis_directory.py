"""Redis-backed :class:`Directory`: shared by every process, durable with AOF.

Failure policy: sockets time out fast (``socket_timeout`` 1 s, connect 0.5 s)
and a command is retried once without backoff, which is exactly what a pooled
connection left dead by a Redis restart needs; anything beyond that surfaces
as :class:`StoreUnavailableError` (``retryable=True``) instead of hanging the
caller. The pool reconnects by itself on the next call, so no explicit
"reconnect" step exists. Lua scripts are re-loaded transparently after a
restart empties the server's script cache (redis-py handles NOSCRIPT).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import redis_lua as lua
from .directory import Directory, _check_ttl
from .errors import BlobNotFoundError, ContextExistsError, ContextNotFoundError, StoreUnavailableError
from .records import BlobMeta, ContextRecord, DeleteResult, ReapResult, ReleaseResult, validate_id

__all__ = ["RedisDirectory", "lease_member"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def lease_member(context_id: str, holder_id: str) -> str:
    """Canonical zset member for a (context, holder) lease; Lua decodes it with cjson."""
    return json.dumps([context_id, holder_id], separators=(",", ":"), ensure_ascii=True)


def _wrap(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn redis connectivity failures into StoreUnavailableError(retryable=True)."""

    @functools.wraps(fn)
    def inner(self: "RedisDirectory", *args: Any, **kwargs: Any) -> T:
        try:
            return fn(self, *args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # BusyLoadingError is a ConnectionError
            raise StoreUnavailableError(
                f"Redis directory at {self.safe_url} unavailable during {fn.__name__}: "
                f"{type(exc).__name__}: {exc}; retry later", retryable=True) from exc

    return inner


class RedisDirectory(Directory):
    """Directory in one Redis database, keys prefixed ``"<namespace>:"``."""

    backend = "redis"

    def __init__(self, url: str, namespace: str = "agentctx", *, socket_timeout: float = 1.0,
                 connect_timeout: float = 0.5, max_connections: int = 64) -> None:
        validate_id(namespace, "namespace")
        self.url = url
        self.namespace = namespace
        self.prefix = f"{namespace}:"
        self.client = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 1),
            health_check_interval=0, max_connections=max_connections)
        # Records are immutable once created (a re-create gets a new ``gen``), so a
        # reattach only ships the record when this client hasn't seen that generation.
        self._records: OrderedDict[str, tuple[str, ContextRecord]] = OrderedDict()
        self._records_lock = threading.Lock()
        self._scripts = {name: self.client.register_script(getattr(lua, name))
                         for name in ("ACQUIRE", "RENEW", "RELEASE", "REAP", "CREATE", "DELETE",
                                      "CLAIM_FREE", "CLAIM_EVICT", "PUT_BLOB_META", "GET_BLOB_META", "PUT_DOC",
                                      "GET_DOC")}

    @property
    def safe_url(self) -> str:
        """The URL without a password, for messages."""
        head, sep, tail = self.url.rpartition("@")
        return (self.url.split("//", 1)[0] + "//***@" + tail) if sep else self.url

    def _run(self, name: str, *argv: Any) -> Any:
        return self._scripts[name](keys=[], args=[self.prefix, *argv])

    @_wrap
    def ping(self) -> None:
        self.client.ping()

    @_wrap
    def create_context(self, record: ContextRecord) -> bool:
        record = record.validate()
        if not record.created_at:
            record.created_at = float(self.client.time()[0])
        flat: list[str] = ["gen", uuid.uuid4().hex]
        for k, v in record.to_fields().items():
            flat += [k, v]
        code = int(self._run("CREATE", record.context_id, *flat))
        if code == -2:
            raise ContextExistsError(f"context {record.context_id!r} is being deleted; retry later", retryable=True)
        if code == -1:
            raise ContextExistsError(f"context id {record.context_id!r} is taken")
        return code == 1

    @_wrap
    def get_context(self, context_id: str, tenant: str) -> ContextRecord:
        fields = self.client.hgetall(self.prefix + "ctx:" + context_id)
        if not fields or fields.get("deleted") == "1" or fields.get("tenant") != tenant:
            raise ContextNotFoundError(context_id)
        return ContextRecord.from_fields(fields)

    @_wrap
    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        out = self._run("DELETE", context_id, tenant)
        if int(out[0]) == -1:
            raise ContextNotFoundError(context_id)
        return DeleteResult(freeable=list(out[2]), context_removed=bool(int(out[0])), holders=int(out[1]))

    @_wrap
    def list_contexts(self, tenant: str | None = None) -> list[str]:
        ids = sorted(self.client.smembers(self.prefix + "contexts"))
        if tenant is None:
            return ids
        pipe = self.client.pipeline(transaction=False)
        for cid in ids:
            pipe.hget(self.prefix + "ctx:" + cid, "tenant")
        return [cid for cid, t in zip(ids, pipe.execute()) if t == tenant]

    @_wrap
    def acquire(self, context_id: str, tenant: str, holder_id: str, ttl_s: float) -> ContextRecord:
        validate_id(holder_id, "holder_id")
        _check_ttl(ttl_s)
        with self._records_lock:
            cached = self._records.get(context_id)
        out = self._run("ACQUIRE", context_id, tenant, lease_member(context_id, holder_id), holder_id,
                        int(ttl_s * 1000), cached[0] if cached else "")
        if int(out[0]) == 0:
            raise ContextNotFoundError(context_id)
        gen = out[2]
        if len(out) < 4 and cached is not None and cached[0] == gen:
            return replace(cached[1])
        flat = out[3]
        record = ContextRecord.from_fields(dict(zip(flat[::2], flat[1::2])))
        with self._records_lock:
            self._records[context_id] = (gen, record)
            self._records.move_to_end(context_id)
            while len(self._records) > 256:
                self._records.popitem(last=False)
        return replace(record)

    @_wrap
    def renew(self, context_id: str, holder_id: str, ttl_s: float) -> bool:
        _check_ttl(ttl_s)
        return bool(int(self._run("RENEW", context_id, lease_member(context_id, holder_id), holder_id,
                                  int(ttl_s * 1000))))

    @_wrap
    def release(self, context_id: str, holder_id: str) -> ReleaseResult:
        out = self._run("RELEASE", lease_member(context_id, holder_id))
        result = ReleaseResult(released=bool(int(out[0])), freeable=list(out[2]), context_removed=bool(int(out[1])))
        if not result.released:
            log.warning("release of context %r by holder %r: not held (double release or lease reaped); ignored",
                        context_id, holder_id)
        return result

    @_wrap
    def reap_expired(self, limit: int = 10_000) -> ReapResult:
        out = self._run("REAP", int(limit))
        return ReapResult(reaped=int(out[0]), freeable=list(out[1]), removed_contexts=list(out[2]))

    @_wrap
    def holders(self, context_id: str) -> dict[str, float]:
        now_s, now_us = self.client.time()
        now_ms = now_s * 1000 + now_us // 1000
        raw = self.client.hgetall(self.prefix + "hl:" + context_id)
        return {h: (int(exp) - now_ms) / 1000.0 for h, exp in raw.items()}

    def _page_field(self, page_ids: list[str], name: str) -> list[int]:
        if not page_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for p in page_ids:
            pipe.hget(self.prefix + "pg:" + p, name)
        return [max(0, int(v or 0)) for v in pipe.execute()]

    @_wrap
    def refcounts(self, page_ids: list[str]) -> list[int]:
        return self._page_field(list(page_ids), "rc")

    @_wrap
    def context_refs(self, page_ids: list[str]) -> list[int]:
        return self._page_field(list(page_ids), "ctx")

    @_wrap
    def claim_free(self, page_ids: list[str]) -> list[str]:
        pages = list(dict.fromkeys(page_ids))
        return list(self._run("CLAIM_FREE", *pages)) if pages else []

    @_wrap
    def claim_evict(self, page_ids: list[str]) -> list[str]:
        pages = list(dict.fromkeys(page_ids))
        return list(self._run("CLAIM_EVICT", *pages)) if pages else []

    @_wrap
    def put_blob_meta(self, context_id: str, meta: BlobMeta, tenant: str | None = None) -> None:
        validate_id(meta.name, "blob name")
        if not int(self._run("PUT_BLOB_META", context_id, tenant or "", meta.name, meta.to_json())):
            raise ContextNotFoundError(context_id)

    @_wrap
    def get_blob_meta(self, context_id: str, name: str, tenant: str | None = None) -> BlobMeta:
        out = self._run("GET_BLOB_META", context_id, tenant or "", name)
        if int(out[0]) == 0:
            raise ContextNotFoundError(context_id)
        if len(out) < 2 or not out[1]:
            raise BlobNotFoundError(f"context {context_id!r} has no blob {name!r}")
        return BlobMeta.from_json(out[1])

    @_wrap
    def put_document(self, context_id: str, text: str, tenant: str | None = None) -> None:
        if not int(self._run("PUT_DOC", context_id, tenant or "", text)):
            raise ContextNotFoundError(context_id)

    @_wrap
    def get_document(self, context_id: str, tenant: str | None = None) -> str:
        out = self._run("GET_DOC", context_id, tenant or "")
        if int(out[0]) == 0:
            raise ContextNotFoundError(context_id)
        if len(out) < 2 or out[1] is None or out[1] is False:
            raise BlobNotFoundError(f"context {context_id!r} has no stored document")
        return out[1]

    @_wrap
    def list_blobs(self, context_id: str) -> list[BlobMeta]:
        if self.client.hget(self.prefix + "ctx:" + context_id, "deleted") != "0":
            return []
        return [BlobMeta.from_json(v) for v in self.client.hvals(self.prefix + "blobs:" + context_id)]

    # Prefill checkpoints are plain keys with a Redis expiry: nothing else reads or counts them.
    def _checkpoint_key(self, key: str, tenant: str) -> str:
        return f"{self.prefix}ckpt:{validate_id(tenant, 'tenant')}:{validate_id(key, 'checkpoint key')}"

    @_wrap
    def put_checkpoint(self, key: str, tenant: str, value: str, ttl_s: float) -> None:
        _check_ttl(ttl_s)
        self.client.set(self._checkpoint_key(key, tenant), value, px=max(1, int(ttl_s * 1000)))

    @_wrap
    def get_checkpoint(self, key: str, tenant: str) -> str | None:
        return self.client.get(self._checkpoint_key(key, tenant))

    @_wrap
    def delete_checkpoint(self, key: str, tenant: str) -> bool:
        return bool(self.client.delete(self._checkpoint_key(key, tenant)))

    @_wrap
    def stats(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        pipe.scard(self.prefix + "contexts")
        pipe.zcard(self.prefix + "leases")
        pipe.hget(self.prefix + "stats", "negative_clamps")
        contexts, leases, clamps = pipe.execute()
        return {"contexts": int(contexts), "leases": int(leases), "negative_clamps": int(clamps or 0)}

    @property
    def negative_clamps(self) -> int:
        return self.stats()["negative_clamps"]

    def close(self) -> None:
        self.client.close()
