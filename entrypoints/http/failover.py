"""The retries of one model call: lost pages and blobs are put back once, and a dead replica is
retried (with backoff) until its replacement answers.

The window for a replacement to answer, ``REPLICA_RETRY_S``, counts from the replica's failure,
not from the request's start: a request that had run for a while when its replica died gets the
same chance as a new one. A live replacement is confirmed with a cheap ``info`` probe before the
call is sent again; once one answers, the retried call runs under the request's own deadline
(``serve.request_timeout_s`` from its start), so a long generation can finish on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from agentctx.entrypoints.http.errors import APIError, is_replica_failure, retry_headers
from agentctx.kv_store.errors import BlobNotFoundError, PagesMissingError
from agentctx.serving.types import GenerateRequest

__all__ = ["Failover", "REPLICA_RETRY_S"]

log = logging.getLogger(__name__)

REPLICA_RETRY_S = 25.0  # how long after a replica's death a request waits for its replacement


class Failover:
    """One call's deadline and retry state.

    ``repair(context_id, tenant)`` puts lost pages and blobs back; ``probe(timeout_s) -> bool``
    says whether a model replica answers now (None: retry without probing).
    """

    def __init__(self, timeout_s: float, retry_after_s: float, repair: Callable[[str, str], Awaitable[int]],
                 probe: Callable[[float], Awaitable[bool]] | None = None):
        self.deadline = time.monotonic() + timeout_s
        self.retry_until: float | None = None  # set at the first replica failure
        self.retry_after_s, self.repair, self.probe = retry_after_s, repair, probe
        self.backoff, self.repaired, self.failed_over = 0.2, False, False

    async def recover(self, req: GenerateRequest, inner: BaseException, what: str) -> bool:
        """Whether to try the call again (after repairing or waiting); False: ``inner`` is the answer."""
        if isinstance(inner, (PagesMissingError, BlobNotFoundError)) and not self.repaired:
            self.repaired = True
            await self.repair(req.context_id, req.tenant)
            return True
        if not is_replica_failure(inner):
            return False
        now = time.monotonic()
        if self.retry_until is None:
            self.retry_until = now + REPLICA_RETRY_S
        self.failed_over = True
        while True:
            if time.monotonic() + self.backoff >= min(self.retry_until, self.deadline):
                return False
            log.warning("%s (%s); retrying in %.1f s", what, type(inner).__name__, self.backoff)
            await asyncio.sleep(self.backoff)
            self.backoff = min(2.0, self.backoff * 2)
            left = min(self.retry_until, self.deadline) - time.monotonic()
            if self.probe is None or (left > 0 and await self.probe(left)):
                return True

    def timeout_error(self) -> APIError:
        headers = retry_headers(self.retry_after_s)
        if self.failed_over:
            return APIError(503, "the model replica failed and its replacement did not answer in time; retry",
                            type="service_unavailable", code="replica_unavailable", headers=headers)
        return APIError(504, "the model did not answer in time", type="timeout", code="timeout", headers=headers)
