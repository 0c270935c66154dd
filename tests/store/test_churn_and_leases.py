"""Concurrency and failure of holders: refcount churn from 16 actors, reaping a killed holder."""

from __future__ import annotations

import random
import time

import pytest
import ray
import torch

from agentctx.kv_store import ContextNotFoundError, KVStore

from .conftest import make_record

pytestmark = [pytest.mark.redis, pytest.mark.ray]

N_PAGES, N_CTX, CTX_PAGES, N_AGENTS = 100, 13, 16, 16


def ctx_pages(k: int, ids: list[str]) -> list[str]:
    return [ids[(k * 8 + j) % N_PAGES] for j in range(CTX_PAGES)]  # overlapping ring of contexts


@ray.remote(num_cpus=0)
class ChurnAgent:
    def __init__(self, redis_url, namespace):
        self.store = KVStore.connect(redis_url, namespace)

    def run(self, seed, iterations, index_of):
        rng = random.Random(seed)
        opened = not_found = reads = 0
        for _ in range(iterations):
            held = []
            for k in rng.sample(range(N_CTX), rng.choice([1, 2])):
                try:
                    held.append(self.store.open(f"ctx{k}", "acme"))
                    opened += 1
                except ContextNotFoundError:
                    not_found += 1  # deleted by the driver meanwhile
            for h in held:
                # While held: every page readable, intact, and counted by the directory.
                assert min(self.store.refcounts(h.page_ids)) >= 1
                for pid, page in zip(h.page_ids, h.get_pages()):
                    assert float(page[0, 0]) == index_of[pid], "page content changed or freed while held"
                    reads += 1
            if rng.random() < 0.5:
                time.sleep(rng.random() * 0.01)
            for h in held:
                h.close()
        return opened, not_found, reads


def test_refcount_churn_16_actors_ends_at_zero(make_store, redis_url):
    store = make_store()
    ids = [f"{i:064x}" for i in range(1, N_PAGES + 1)]
    store.put_pages(ids, [torch.full((4, 8), float(i)) for i in range(N_PAGES)])
    index_of = {pid: i for i, pid in enumerate(ids)}
    for k in range(N_CTX):
        store.create_context(make_record(f"ctx{k}", "acme", ctx_pages(k, ids)))

    agents = [ChurnAgent.remote(redis_url, store.namespace) for _ in range(N_AGENTS)]
    ray.get([a.__ray_ready__.remote() for a in agents])
    runs = [a.run.remote(seed, 25, index_of) for seed, a in enumerate(agents)]
    time.sleep(0.3)
    deleted = [0, 6]
    for k in deleted:
        store.delete_context(f"ctx{k}", "acme")
    samples = 0
    pending = runs
    while pending:  # sample refcounts during the churn: never negative
        _, pending = ray.wait(pending, timeout=0.05)
        assert min(store.refcounts(ids)) >= 0
        samples += 1
    results = ray.get(runs)
    assert sum(r[0] for r in results) > N_AGENTS * 20 and sum(r[2] for r in results) > 0

    assert store.refcounts(ids) == [0] * N_PAGES
    metrics = store.metrics()
    assert metrics["directory"]["negative_clamps"] == 0 and metrics["directory"]["leases"] == 0
    live = {p for k in range(N_CTX) if k not in deleted for p in ctx_pages(k, ids)}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        present = dict(zip(ids, store.has_pages(ids)))
        if all(present[p] == (p in live) for p in ids):
            break
        time.sleep(0.05)
    assert {p for p, ok in present.items() if ok} == live  # exactly the orphaned pages were freed
    for a in agents:
        ray.kill(a)


@ray.remote(num_cpus=0)
class Holder:
    def hold(self, redis_url, namespace, context_id, ttl):
        self.store = KVStore.connect(redis_url, namespace)
        self.handle = self.store.open(context_id, "acme", lease_ttl_s=ttl)
        return self.handle.holder_id


@pytest.mark.parametrize("reaper", ["direct_call", "actor_thread"])
def test_killed_holder_is_reclaimed_after_ttl(make_store, redis_url, reaper):
    ttl = 1.5
    store = make_store(lease_ttl_s=ttl, reap_interval_s=60 if reaper == "direct_call" else 0.3)
    ids = [f"{i:064x}" for i in range(1, 5)]
    store.put_pages(ids, [torch.zeros(8)] * 4)
    store.create_context(make_record("doc", "acme", ids))
    dying, living = Holder.remote(), Holder.remote()
    ray.get([dying.hold.remote(redis_url, store.namespace, "doc", ttl),
             living.hold.remote(redis_url, store.namespace, "doc", ttl)])
    assert store.refcounts(ids) == [2] * 4
    ray.kill(dying)
    time.sleep(ttl * 0.5)
    assert store.refcounts(ids) == [2] * 4  # not before the TTL
    if reaper == "direct_call":
        time.sleep(ttl * 0.7)
        assert store.reap_expired() == 1
    else:
        deadline = time.monotonic() + ttl + 3
        while store.refcounts(ids)[0] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert store.refcounts(ids) == [1] * 4  # the living holder kept renewing past its TTL
    assert len(store.holders("doc")) == 1
    assert store.metrics()["reaped_leases"] == 1
    ray.kill(living)
