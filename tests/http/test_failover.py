"""Failover timing: the window for a dead replica's replacement counts from the failure.

The issue: 3 queries in flight, the replica killed 4 s in; all 3 got 503 at 28 s (25 s counted
from each request's start) while new requests already succeeded on the replacement. Here the
same shape runs on a compressed clock (the window patched to 0.6 s): a call that dies 0.5 s in,
a replacement that answers 0.4 s after the death, a retried call that takes 0.5 s.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray
import ray.serve.exceptions  # noqa: F401  (imported on first use by is_replica_failure: ~0.4 s)

from agentctx.entrypoints.http import failover
from agentctx.entrypoints.http.failover import Failover
from agentctx.serving.types import GenerateRequest

REQ = GenerateRequest("ctx-x", "prompt")


async def _no_repair(_cid, _tenant) -> int:
    return 0


def _run(call, probe, timeout_s=10.0):
    async def main():
        tries = Failover(timeout_s, 1.0, _no_repair, probe)
        attempts = 0
        while True:
            attempts += 1
            try:
                return await call(attempts), attempts, tries
            except Exception as exc:
                if await tries.recover(REQ, exc, "replica failed"):
                    continue
                return exc, attempts, tries

    return asyncio.run(main())


def test_retry_window_counts_from_the_failure(monkeypatch):
    monkeypatch.setattr(failover, "REPLICA_RETRY_S", 0.6)
    t0 = time.monotonic()
    died_at = {}

    async def call(attempt):
        if attempt == 1:
            await asyncio.sleep(0.5)  # the request had run 0.5 s when its replica died
            died_at["t"] = time.monotonic()
            raise ray.exceptions.RayActorError()
        await asyncio.sleep(0.5)  # the retried generation on the replacement
        return "answer"

    async def probe(timeout_s):  # the replacement answers 0.4 s after the death
        wait = died_at["t"] + 0.4 - time.monotonic()
        if wait > timeout_s:
            await asyncio.sleep(timeout_s)
            return False
        await asyncio.sleep(max(0.0, wait))
        return True

    out, attempts, tries = _run(call, probe)
    assert out == "answer" and attempts == 2, out
    assert tries.retry_until == pytest.approx(died_at["t"] + 0.6, abs=0.05)
    assert time.monotonic() - t0 < 2.0


def test_no_replacement_gives_503_within_the_window_from_the_failure(monkeypatch):
    monkeypatch.setattr(failover, "REPLICA_RETRY_S", 0.6)

    async def call(attempt):
        await asyncio.sleep(0.3 if attempt == 1 else 0.0)
        raise ray.exceptions.RayActorError()

    async def probe(timeout_s):
        await asyncio.sleep(timeout_s)
        return False

    t0 = time.monotonic()
    out, attempts, tries = _run(call, probe)
    took = time.monotonic() - t0
    assert isinstance(out, ray.exceptions.RayActorError) and tries.failed_over
    assert 0.3 + 0.6 - 0.25 <= took <= 0.3 + 0.6 + 0.3, took
    err = tries.timeout_error()
    assert err.status == 503 and err.code == "replica_unavailable" and "Retry-After" in err.headers


def test_other_errors_are_not_retried():
    async def call(attempt):
        raise ValueError("bad request")

    out, attempts, _ = _run(call, None)
    assert isinstance(out, ValueError) and attempts == 1
