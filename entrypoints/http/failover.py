"""The retries of one model call: evicted pages are put back once, and a dead replica is retried
(with backoff) until its replacement answers, within ``REPLICA_RETRY_S``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from agentctx.entrypoints.http.errors import APIError, is_replica_failure, retry_headers
from agentctx.kv_store.errors import PagesMissingError
from agentctx.serving.types import GenerateRequest

__all__ = ["Failover", "REPLICA_RETRY_S", "FAILOVER_GRACE_S"]

log = logging.getLogger(__name__)

REPLICA_RETRY_S = 25.0  # how long a request waits for a dead replica to be replaced
FAILOVER_GRACE_S = 3.0  # a request retried after a replica death ends by then (+ the above)


class Failover:
    """One call's deadline and retry state. ``repair(context_id, tenant)`` puts evicted pages back."""

    def __init__(self, timeout_s: float, retry_after_s: float, repair: Callable[[str, str], Awaitable[int]]):
        now = time.monotonic()
        self.deadline = now + timeout_s
        self.retry_until = now + min(REPLICA_RETRY_S, timeout_s)
        self.retry_after_s, self.repair = retry_after_s, repair
        self.backoff, self.repaired, self.failed_over = 0.2, False, False

    async def recover(self, req: GenerateRequest, inner: BaseException, what: str) -> bool:
        """Whether to try the call again (after repairing or waiting); False: ``inner`` is the answer."""
        if isinstance(inner, PagesMissingError) and not self.repaired:
            self.repaired = True
            await self.repair(req.context_id, req.tenant)
            return True
        if is_replica_failure(inner) and time.monotonic() + self.backoff < self.retry_until:
            log.warning("%s (%s); retrying in %.1f s", what, type(inner).__name__, self.backoff)
            # After a replica death the client gets an answer or a clear error within
            # the failover window, not after a full generation on the replacement.
            self.failed_over, self.deadline = True, min(self.deadline, self.retry_until + FAILOVER_GRACE_S)
            await asyncio.sleep(self.backoff)
            self.backoff = min(2.0, self.backoff * 2)
            return True
        return False

    def timeout_error(self) -> APIError:
        headers = retry_headers(self.retry_after_s)
        if self.failed_over:
            return APIError(503, "the model replica failed and its replacement did not finish in time; retry",
                            type="service_unavailable", code="replica_unavailable", headers=headers)
        return APIError(504, "the model did not answer in time", type="timeout", code="timeout", headers=headers)
