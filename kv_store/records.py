"""Typed records that cross the store's boundaries (facade, actor, directory).

All of them are plain dataclasses of JSON-friendly values, so the Redis
directory can store them as hash fields and Ray can pickle them cheaply.
Validation lives here so every backend rejects the same bad inputs *before*
writing anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidInputError

__all__ = [
    "ContextRecord",
    "BlobMeta",
    "ReleaseResult",
    "ReapResult",
    "DeleteResult",
    "validate_id",
    "validate_page_ids",
    "unique_in_order",
]

_MAX_ID_LEN = 256


def validate_id(value: object, what: str) -> str:
    """Ids are non-empty printable strings without whitespace (they become Redis keys and file names)."""
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty str, got {value!r}")
    if len(value) > _MAX_ID_LEN:
        raise InvalidInputError(f"{what} longer than {_MAX_ID_LEN} characters")
    if not value.isprintable() or any(ch.isspace() for ch in value):
        raise InvalidInputError(f"{what} must be printable without whitespace, got {value!r}")
    return value


def validate_page_ids(page_ids: object) -> list[str]:
    if isinstance(page_ids, (str, bytes)) or not isinstance(page_ids, (list, tuple)):
        raise InvalidInputError("page ids must be a list of str")
    return [validate_id(p, "page id") for p in page_ids]


def unique_in_order(items: list[str]) -> list[str]:
    """Distinct items, first occurrence order (refcounts count a page once per context)."""
    return list(dict.fromkeys(items))


def _spans(value: object, what: str) -> list[tuple[int, int]]:
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"{what} must be a list of (start, end) pairs")
    out: list[tuple[int, int]] = []
    for pair in value:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InvalidInputError(f"{what} entries must be (start, end) pairs, got {pair!r}")
        start, end = pair
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)) or not 0 <= start <= end:
            raise InvalidInputError(f"{what} entries must be ints with 0 <= start <= end, got {pair!r}")
        out.append((start, end))
    return out


@dataclass
class ContextRecord:
    """Directory entry of one context (one prefilled document).

    ``page_ids[i]`` covers tokens ``token_spans[i]`` and characters
    ``char_spans[i]`` (char spans may be empty when unknown). ``page_bytes``
    is filled in by the store from the stored pages when left empty.
    ``extra`` must be JSON-serialisable (it is stored as JSON).
    """

    context_id: str
    tenant: str
    model_id: str
    dtype: str
    page_ids: list[str]
    token_spans: list[tuple[int, int]]
    char_spans: list[tuple[int, int]] = field(default_factory=list)
    num_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    page_bytes: list[int] = field(default_factory=list)
    created_at: float = 0.0

    def validate(self) -> "ContextRecord":
        """Return a normalised copy or raise :class:`InvalidInputError`; never mutates ``self``."""
        validate_id(self.context_id, "context_id")
        validate_id(self.tenant, "tenant")
        if not isinstance(self.model_id, str) or not self.model_id:
            raise InvalidInputError("model_id must be a non-empty str")
        if not isinstance(self.dtype, str) or not self.dtype:
            raise InvalidInputError("dtype must be a non-empty str such as 'bfloat16'")
        pages = validate_page_ids(self.page_ids)
        token_spans = _spans(self.token_spans, "token_spans")
        char_spans = _spans(self.char_spans, "char_spans")
        if len(token_spans) != len(pages):
            raise InvalidInputError(f"{len(pages)} pages but {len(token_spans)} token spans")
        if char_spans and len(char_spans) != len(pages):
            raise InvalidInputError(f"{len(pages)} pages but {len(char_spans)} char spans")
        if not isinstance(self.num_tokens, int) or isinstance(self.num_tokens, bool) or self.num_tokens < 0:
            raise InvalidInputError("num_tokens must be a non-negative int")
        if token_spans and self.num_tokens < token_spans[-1][1]:
            raise InvalidInputError("num_tokens is smaller than the last token span end")
        if not isinstance(self.extra, dict):
            raise InvalidInputError("extra must be a dict")
        try:
            extra = json.loads(json.dumps(self.extra, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"extra must be JSON-serialisable: {exc}") from exc
        page_bytes = list(self.page_bytes)
        if page_bytes and (len(page_bytes) != len(pages) or any(not isinstance(b, int) or b < 0 for b in page_bytes)):
            raise InvalidInputError("page_bytes must be empty or one non-negative int per page")
        created = float(self.created_at or 0.0)
        if not math.isfinite(created):
            raise InvalidInputError("created_at must be finite")
        return ContextRecord(
            self.context_id, self.tenant, self.model_id, self.dtype, pages, token_spans,
            char_spans, self.num_tokens, extra, page_bytes, created,
        )

    @property
    def unique_page_ids(self) -> list[str]:
        return unique_in_order(self.page_ids)

    @property
    def total_bytes(self) -> int:
        return sum(self.page_bytes)

    def same_content(self, other: "ContextRecord") -> bool:
        """Equal in everything a re-create could legitimately repeat (not timestamps)."""
        return (self.tenant, self.model_id, self.dtype, self.page_ids, [tuple(s) for s in self.token_spans],
                self.num_tokens) == (other.tenant, other.model_id, other.dtype, other.page_ids,
                                     [tuple(s) for s in other.token_spans], other.num_tokens)

    def to_fields(self) -> dict[str, str]:
        """Flat str fields for a Redis hash."""
        return {
            "context_id": self.context_id,
            "tenant": self.tenant,
            "model_id": self.model_id,
            "dtype": self.dtype,
            "page_ids": json.dumps(self.page_ids),
            "uniq": json.dumps(self.unique_page_ids),
            "token_spans": json.dumps(self.token_spans),
            "char_spans": json.dumps(self.char_spans),
            "num_tokens": str(self.num_tokens),
            "extra": json.dumps(self.extra),
            "page_bytes": json.dumps(self.page_bytes),
            "created_at": repr(self.created_at),
        }

    @classmethod
    def from_fields(cls, f: dict[str, str]) -> "ContextRecord":
        return cls(
            context_id=f["context_id"],
            tenant=f["tenant"],
            model_id=f["model_id"],
            dtype=f["dtype"],
            page_ids=json.loads(f["page_ids"]),
            token_spans=[tuple(s) for s in json.loads(f["token_spans"])],
            char_spans=[tuple(s) for s in json.loads(f["char_spans"])],
            num_tokens=int(f["num_tokens"]),
            extra=json.loads(f["extra"]),
            page_bytes=json.loads(f["page_bytes"]),
            created_at=float(f["created_at"]),
        )


@dataclass(frozen=True)
class BlobMeta:
    """Metadata of a per-context blob; the payload itself lives in the store actor."""

    name: str
    kind: str  # "tensor" or "bytes"
    nbytes: int
    dtype: str = ""
    shape: tuple[int, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "kind": self.kind, "nbytes": self.nbytes,
                           "dtype": self.dtype, "shape": list(self.shape)})

    @classmethod
    def from_json(cls, text: str) -> "BlobMeta":
        d = json.loads(text)
        return cls(d["name"], d["kind"], int(d["nbytes"]), d.get("dtype", ""), tuple(d.get("shape", ())))


@dataclass
class ReleaseResult:
    """Outcome of releasing one (context, holder) lease."""

    released: bool  # False: the holder held nothing (double release) — a no-op
    freeable: list[str] = field(default_factory=list)  # pages now at refcount 0 used by no context
    context_removed: bool = False  # a deleted context lost its last holder; its blobs can go


@dataclass
class ReapResult:
    """Outcome of reclaiming expired leases."""

    reaped: int = 0
    freeable: list[str] = field(default_factory=list)
    removed_contexts: list[str] = field(default_factory=list)


@dataclass
class DeleteResult:
    """Outcome of deleting a context from the directory."""

    freeable: list[str] = field(default_factory=list)
    context_removed: bool = True  # False: still held; removed when the last holder releases
    holders: int = 0
