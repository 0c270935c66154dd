"""Typed errors of the KV page store.

Every error the store raises on purpose derives from :class:`StoreError`, so a
caller can catch the family, and carries ``retryable``: ``True`` means the same
call may succeed later without any change (Redis restarting, the store actor
being rescheduled), ``False`` means the request itself is wrong or refers to
something that does not exist.

The errors cross process boundaries (a Ray actor raises, a driver catches), so
each one pickles its keyword state explicitly: plain ``Exception`` pickling
keeps only ``args`` and would silently drop ``retryable`` and the id lists.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "StoreError",
    "StoreUnavailableError",
    "ContextNotFoundError",
    "ContextExistsError",
    "PagesMissingError",
    "BlobNotFoundError",
    "ContextLostError",
    "PageNotInContextError",
    "InvalidInputError",
    "DeviceCacheFullError",
]


class StoreError(Exception):
    """Base class of every deliberate store error."""

    default_retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable

    def _state(self) -> dict[str, Any]:
        return {"retryable": self.retryable}

    def __reduce__(self):  # keep keyword state across pickling (Ray, multiprocessing)
        return (_rebuild, (type(self), self.message, self._state()))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[StoreError], message: str, state: dict[str, Any]) -> StoreError:
    err = cls.__new__(cls)
    StoreError.__init__(err, message, retryable=state.pop("retryable", None))
    err.__dict__.update(state)
    return err


class StoreUnavailableError(StoreError):
    """The directory (Redis) or the store actor cannot be reached right now.

    Always retryable: the client reconnects on the next call, so the caller's
    retry policy (backoff, give up after N) decides what happens next.
    """

    default_retryable = True


class ContextNotFoundError(StoreError, KeyError):
    """No such context *for this tenant*.

    A context that exists under another tenant raises this same error with the
    same message, so a tenant can't probe which context ids exist elsewhere.
    """

    def __init__(self, context_id: str, *, retryable: bool | None = None) -> None:
        super().__init__(f"context {context_id!r} not found", retryable=retryable)
        self.context_id = context_id

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "context_id": self.context_id}

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.message


class ContextExistsError(StoreError):
    """``create_context`` with an id that already names a different context.

    Also raised (retryable) while a deleted context is still held by handles:
    its id becomes free once the last holder releases or its lease expires.
    """


class PagesMissingError(StoreError):
    """Some pages are not in the host tier (never put, evicted, or lost with the actor).

    ``page_ids`` lists them; the engine re-prefills those pages and puts them
    again. Retryable only in that sense, so ``retryable`` is False.
    """

    def __init__(self, page_ids: list[str], message: str | None = None, *, retryable: bool | None = None) -> None:
        shown = ", ".join(p[:12] for p in page_ids[:4]) + (" ..." if len(page_ids) > 4 else "")
        super().__init__(message or f"{len(page_ids)} page(s) missing from the store: {shown}", retryable=retryable)
        self.page_ids = list(page_ids)

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "page_ids": self.page_ids}


class BlobNotFoundError(StoreError, KeyError):
    """No blob of that name on the context."""

    def __str__(self) -> str:
        return self.message


class ContextLostError(StoreError):
    """A context the directory lists whose pages or blobs are gone and whose document is not kept
    anywhere (created before the directory kept documents, or by a text that no longer matches).

    Not retryable as is; uploading the same text again rebuilds it.
    """

    def __init__(self, context_id: str, message: str | None = None, *, retryable: bool | None = None) -> None:
        super().__init__(message or f"context {context_id!r} lost its KV and no stored copy of its document "
                                    "remains; upload the same text again to rebuild it", retryable=retryable)
        self.context_id = context_id

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "context_id": self.context_id}


class PageNotInContextError(StoreError, ValueError):
    """A handle was asked for a page that its context does not contain.

    Handles only serve their own context's pages: page ids are content hashes
    salted per tenant, and this check keeps a leaked id from becoming a read.
    """


class InvalidInputError(StoreError, ValueError):
    """Malformed arguments; raised before anything is written."""


class DeviceCacheFullError(StoreError):
    """Every page in a :class:`DevicePageCache` is pinned and the new one doesn't fit."""

    default_retryable = True
