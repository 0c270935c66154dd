"""Content addressing of KV pages.

A page's id is a SHA-256 over a canonical byte encoding of everything that
determines its KV values: the model, the tenant (as a salt), the id of the page
before it (so a page id commits to the whole prefix, as causal attention does),
and the page's token ids. Two documents that share a token prefix under the
same model and tenant therefore produce the same leading page ids and share
those pages; two tenants never do, because their salts differ.

Python's ``hash()`` is never used: it is salted per process (PYTHONHASHSEED),
so ids would differ between the driver and every Ray actor.
"""

from __future__ import annotations

import hashlib
import operator
import struct
from collections.abc import Iterable, Sequence

from .errors import InvalidInputError

__all__ = ["HASH_VERSION", "ROOT_PARENT", "tenant_salt", "kv_namespace", "page_hash", "page_hashes", "is_page_id"]

#: Bumped if the encoding below ever changes, so old and new ids never collide.
HASH_VERSION = b"agentctx/kv-page/v1"
#: Parent of the first page of every document.
ROOT_PARENT = ""

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_HEX = frozenset("0123456789abcdef")


def _field(data: bytes) -> bytes:
    # Length-prefixed fields make the encoding injective: ("ab", "c") and
    # ("a", "bc") can't produce the same bytes.
    return struct.pack("<Q", len(data)) + data


def tenant_salt(tenant: str) -> str:
    """Salt that separates tenants' page ids (hex; deterministic across processes)."""
    if not isinstance(tenant, str) or not tenant:
        raise InvalidInputError(f"tenant must be a non-empty str, got {tenant!r}")
    return hashlib.sha256(b"agentctx/tenant/v1\x00" + tenant.encode("utf-8")).hexdigest()


def kv_namespace(model_namespace: str, kv_dtype: str = "auto") -> str:
    """What a page is hashed under: the engine's namespace, plus the stored KV dtype unless "auto".

    An fp8 and a bf16 page of the same tokens hold different bytes and must never share an id;
    "auto" (pages in the compute dtype) keeps the bare namespace, so its ids are the ones
    published before the setting existed.
    """
    if kv_dtype == "auto":
        return model_namespace
    return f"{model_namespace}#kv={kv_dtype}"


def _token_bytes(token_ids: Iterable[int]) -> tuple[int, bytes]:
    values: list[int] = []
    for tok in token_ids:
        if isinstance(tok, bool):  # bool is an int subclass; a True token is a bug upstream
            raise InvalidInputError("token ids must be integers, got a bool")
        try:
            value = operator.index(tok)  # accepts int, numpy ints, 0-d integer tensors
        except TypeError as exc:
            raise InvalidInputError(f"token ids must be integers, got {type(tok).__name__}") from exc
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidInputError(f"token id {value} does not fit in int64")
        values.append(value)
    return len(values), struct.pack(f"<{len(values)}q", *values)


def page_hash(model_id: str, tenant_salt: str, parent_hash: str, token_ids: Sequence[int]) -> str:
    """SHA-256 hex id of one page.

    ``parent_hash`` is the previous page's id, or :data:`ROOT_PARENT` for the
    first page. Token ids are encoded as little-endian int64, so the id does
    not depend on the container type (list, tuple, numpy array, tensor).
    """
    if not isinstance(model_id, str) or not model_id:
        raise InvalidInputError(f"model_id must be a non-empty str, got {model_id!r}")
    if not isinstance(tenant_salt, str):
        raise InvalidInputError("tenant_salt must be a str")
    if not isinstance(parent_hash, str):
        raise InvalidInputError("parent_hash must be a str")
    count, payload = _token_bytes(token_ids)
    if count == 0:
        raise InvalidInputError("a page must contain at least one token")
    h = hashlib.sha256()
    h.update(_field(HASH_VERSION))
    h.update(_field(model_id.encode("utf-8")))
    h.update(_field(tenant_salt.encode("utf-8")))
    h.update(_field(parent_hash.encode("ascii", errors="strict")))
    h.update(_field(payload))
    return h.hexdigest()


def page_hashes(model_id: str, tenant: str, token_pages: Sequence[Sequence[int]]) -> list[str]:
    """Chained ids of a document's pages, first page first."""
    salt = tenant_salt(tenant)
    ids: list[str] = []
    parent = ROOT_PARENT
    for tokens in token_pages:
        parent = page_hash(model_id, salt, parent, tokens)
        ids.append(parent)
    return ids


def is_page_id(value: object) -> bool:
    """True for a 64-character lowercase hex string (what :func:`page_hash` returns)."""
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX
