"""Faults around the KV store: redis-server killed and restarted under writes, and the
host-tier budget filled to twice its size.

This module runs its own redis-server (AOF, fsync always) so that killing it
disturbs no other test, and a small store budget (2 MiB) with a device cache
that holds about one context, so that queries must reload evicted pages.
"""

from __future__ import annotations

import time

import pytest

from tests._stack import CONTRACT, KEY_A, running_stack, tiny_config

pytestmark = [pytest.mark.ray, pytest.mark.redis, pytest.mark.reliability]

BUDGET = 2 << 20


@pytest.fixture(scope="module")
def redis(redis_server_factory):
    return redis_server_factory("always")


@pytest.fixture(scope="module")
def stack(ray_local, redis, tiny_ckpt):
    cfg = tiny_config(tiny_ckpt, redis.url, store={"lease_ttl_s": 3.0, "budget_bytes": BUDGET},
                      model={"device_cache_bytes": 600 << 10})
    with running_stack(cfg, own_redis=redis) as s:
        yield s


@pytest.fixture(scope="module")
def a(stack):
    return stack.client(KEY_A, timeout=60)


def _q(client, cid, n=6):
    """A query, asked again while its context is being restored (503 ``context_restoring`` +
    Retry-After, when the rebuild outlasts ``serve.restore_wait_s``, as on a loaded box), as a
    client following Retry-After does."""
    deadline = time.monotonic() + 120
    while True:
        r = client.post(f"/v1/contexts/{cid}/query",
                        json={"question": "What is the payment term?", "max_new_tokens": n, "stop": []})
        restoring = r.status_code == 503 and r.json().get("error", {}).get("code") == "context_restoring"
        if not restoring or time.monotonic() > deadline:
            return r
        time.sleep(float(r.headers.get("retry-after", 1)))


def test_redis_killed_and_restarted_under_writes(stack, a, redis):
    r = a.post("/v1/contexts", json={"text": CONTRACT})
    assert r.status_code in (200, 201), r.text
    cid = r.json()["id"]
    assert _q(a, cid).status_code == 200

    redis.kill()  # SIGKILL: no shutdown save, only what the AOF already has
    outage: dict[int, int] = {}
    slowest = 0.0
    t_end = time.monotonic() + 20
    for i in range(12):  # writes (new documents) and reads, bounded in count and time
        t0 = time.monotonic()
        if i % 3 == 0:
            resp = a.post("/v1/contexts", json={"text": f"Outage document {i}. It says little.\n"})
        elif i % 3 == 1:
            resp = _q(a, cid)
        else:
            resp = a.get(f"/v1/contexts/{cid}")
        slowest = max(slowest, time.monotonic() - t0)
        outage[resp.status_code] = outage.get(resp.status_code, 0) + 1
        assert resp.status_code == 503, resp.text
        assert resp.headers["retry-after"] == "1"
        assert resp.json()["error"]["code"] == "store_unavailable"
        assert time.monotonic() < t_end
    assert a.get("/healthz").status_code == 200  # liveness does not depend on the store

    redis.start()
    t0 = time.monotonic()
    while (r := _q(a, cid)).status_code != 200:
        assert r.status_code == 503, r.text
        assert time.monotonic() - t0 < 10, "no reconnection within 10 s"
        time.sleep(0.1)
    reconnect_s = time.monotonic() - t0
    assert reconnect_s < 5.0, reconnect_s
    # Nothing written before the outage was lost; the refused write goes through now.
    assert a.get(f"/v1/contexts/{cid}").json()["num_tokens"] > 0
    assert a.post("/v1/contexts", json={"text": "Outage document 0. It says little.\n"}).status_code == 201
    assert stack.wait_no_holders([cid], timeout_s=15) == {}
    print(f"redis outage: {sum(outage.values())} requests -> {outage}, slowest {slowest:.2f} s; "
          f"reconnected in {reconnect_s:.2f} s")


def test_budget_filled_twice_stays_bounded_and_outputs_unchanged(stack, a):
    docs = [f"Schedule {i}. " + f"Item {i}: the fee for service line {i} is {100 + i} dollars per month. " * 14
            for i in range(8)]
    first: dict[str, str] = {}
    for text in docs:  # ~0.5 MiB of KV each: 4 MiB into a 2 MiB budget
        r = a.post("/v1/contexts", json={"text": text})
        assert r.status_code == 201, (r.text, len(first), stack.rt.store.metrics())
        cid = r.json()["id"]
        q = _q(a, cid, 8)
        assert q.status_code == 200, q.text
        first[cid] = q.json()["answer"]
        host = stack.rt.store.metrics()["tiers"]["host"]
        assert host["bytes"] <= BUDGET * 1.05, host
    m = stack.rt.store.metrics()
    assert m["evictions"] > 0, m
    # Every context again, oldest first: evicted pages come back by re-prefill, same greedy text.
    prefills_before = stack.rt.client.info()["prefills"]
    for cid, answer in first.items():
        q = _q(a, cid, 8)
        assert q.status_code == 200, q.text
        assert q.json()["answer"] == answer, cid
        assert stack.rt.store.metrics()["tiers"]["host"]["bytes"] <= BUDGET * 1.05
    repairs = stack.rt.client.info()["prefills"] - prefills_before
    assert repairs > 0  # some contexts really had to be rebuilt from their stored text
    assert stack.wait_no_holders(list(first), timeout_s=10) == {}
    print(f"budget 2x: {len(first)} contexts, {m['evictions']} evictions, {repairs} re-prefills, host bytes "
          f"{stack.rt.store.metrics()['tiers']['host']['bytes']} <= {BUDGET} * 1.05, outputs unchanged")
