"""The one place that picks a directory backend: Redis when a URL is set, else a local one."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .directory import NO_REDIS_WARNING, Directory, InProcessDirectory
from .redis_directory import RedisDirectory

__all__ = ["make_directory"]

log = logging.getLogger(__name__)


def make_directory(redis_url: str | None, namespace: str = "agentctx", *,
                   local: Callable[[], Directory | None] = InProcessDirectory, warn: bool = True,
                   **redis_options) -> Directory | None:
    """Redis (shared by every process) for ``redis_url``; otherwise ``local()``, logging why when ``warn``.

    The store actor takes the in-process default; the store client passes ``local=lambda: None``
    and then reaches the actor's directory through the actor.
    """
    if redis_url:
        return RedisDirectory(redis_url, namespace=namespace, **redis_options)
    if warn:
        log.warning(NO_REDIS_WARNING)
    return local()
