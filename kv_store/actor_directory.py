"""A :class:`Directory` that forwards to the directory hosted inside the store actor.

Used when no Redis URL is configured: the in-process directory then lives in
the store actor's process, and every facade (driver or agent actor) reaches it
through the actor, so contexts created by the driver can still be opened by
agents of the same Ray cluster. It is not durable: it dies with the actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .directory import Directory
from .records import BlobMeta, ContextRecord, DeleteResult, ReapResult, ReleaseResult

__all__ = ["ActorDirectory"]


class ActorDirectory(Directory):
    """Forwards each call as ``actor.dir_call(method, *args)`` through ``call``."""

    backend = "inprocess"

    def __init__(self, call: Callable[..., Any], actor: Any) -> None:
        self._call = call  # KVStore._call: maps Ray failures to store errors
        self._actor = actor

    def _fwd(self, method: str, *args: Any) -> Any:
        return self._call(self._actor.dir_call, method, *args)

    def ping(self) -> None:
        self._fwd("ping")

    def create_context(self, record: ContextRecord) -> bool:
        return self._call(self._actor.create_context, record, False)

    def get_context(self, context_id: str, tenant: str) -> ContextRecord:
        return self._fwd("get_context", context_id, tenant)

    def delete_context(self, context_id: str, tenant: str) -> DeleteResult:
        return self._call(self._actor.delete_context, context_id, tenant)

    def list_contexts(self, tenant: str | None = None) -> list[str]:
        return self._fwd("list_contexts", tenant)

    def acquire(self, context_id: str, tenant: str, holder_id: str, ttl_s: float) -> ContextRecord:
        return self._fwd("acquire", context_id, tenant, holder_id, ttl_s)

    def renew(self, context_id: str, holder_id: str, ttl_s: float) -> bool:
        return self._fwd("renew", context_id, holder_id, ttl_s)

    def release(self, context_id: str, holder_id: str) -> ReleaseResult:
        return self._fwd("release", context_id, holder_id)

    def reap_expired(self, limit: int = 10_000) -> ReapResult:
        return self._call(self._actor.reap)

    def holders(self, context_id: str) -> dict[str, float]:
        return self._fwd("holders", context_id)

    def refcounts(self, page_ids: list[str]) -> list[int]:
        return self._fwd("refcounts", list(page_ids))

    def context_refs(self, page_ids: list[str]) -> list[int]:
        return self._fwd("context_refs", list(page_ids))

    def claim_free(self, page_ids: list[str]) -> list[str]:
        return self._fwd("claim_free", list(page_ids))

    def claim_evict(self, page_ids: list[str]) -> list[str]:
        return self._fwd("claim_evict", list(page_ids))

    def put_blob_meta(self, context_id: str, meta: BlobMeta, tenant: str | None = None) -> None:
        self._fwd("put_blob_meta", context_id, meta, tenant)

    def get_blob_meta(self, context_id: str, name: str, tenant: str | None = None) -> BlobMeta:
        return self._fwd("get_blob_meta", context_id, name, tenant)

    def list_blobs(self, context_id: str) -> list[BlobMeta]:
        return self._fwd("list_blobs", context_id)

    def put_document(self, context_id: str, text: str, tenant: str | None = None) -> None:
        self._fwd("put_document", context_id, text, tenant)

    def get_document(self, context_id: str, tenant: str | None = None) -> str:
        return self._fwd("get_document", context_id, tenant)

    def put_checkpoint(self, key: str, tenant: str, value: str, ttl_s: float) -> None:
        self._fwd("put_checkpoint", key, tenant, value, ttl_s)

    def get_checkpoint(self, key: str, tenant: str) -> str | None:
        return self._fwd("get_checkpoint", key, tenant)

    def delete_checkpoint(self, key: str, tenant: str) -> bool:
        return self._fwd("delete_checkpoint", key, tenant)

    def stats(self) -> dict[str, int]:
        return self._fwd("stats")
