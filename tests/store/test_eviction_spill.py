"""Host-tier budget (LRU of refcount-0 pages) and the disk tier (spill / restore)."""

from __future__ import annotations

import pytest
import torch

from agentctx.kv_store import KVStore, PagesMissingError

from .conftest import make_record

pytestmark = [pytest.mark.redis, pytest.mark.ray]

PAGE = (16, 1024)  # float32: 64 KiB per page
PAGE_BYTES = 16 * 1024 * 4


def pages(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def fill(n: int, start: float = 0.0) -> list[torch.Tensor]:
    return [torch.full(PAGE, float(start + i)) for i in range(n)]  # float32: PAGE_BYTES each


def read(store: KVStore, context_id: str, ids: list[str]) -> None:
    with store.open(context_id, "acme") as h:
        h.get_pages(ids)


def test_budget_evicts_only_refcount_zero_pages_in_lru_order(make_store):
    budget = 10 * PAGE_BYTES
    store = make_store(budget_bytes=budget)
    hot, cold = pages("hot", 5), pages("cold", 5)
    store.put_pages(hot, fill(5))
    store.create_context(make_record("hot", "acme", hot))
    held = store.open("hot", "acme")
    store.put_pages(cold, fill(5, 100))
    store.create_context(make_record("cold", "acme", cold))
    read(store, "cold", cold[:2])  # cold000, cold001 become most recently used
    assert store.metrics()["bytes"] == budget

    expected_order = [cold[2], cold[3], cold[4], cold[0], cold[1]]
    new = pages("new", 30)
    evicted_seen: list[str] = []
    for i, pid in enumerate(new):
        store.put_pages([pid], fill(1, 1000 + i))
        m = store.metrics()
        assert m["bytes"] <= budget * 1.05
        assert all(store.has_pages(hot)), "a held page was evicted"
        gone = [p for p in cold + new[:i] if p not in evicted_seen and not store.has_pages([p])[0]]
        evicted_seen += gone
    assert evicted_seen[:5] == expected_order  # LRU among refcount-0 pages; held ones skipped
    assert evicted_seen[5:] == new[:len(evicted_seen) - 5]
    assert store.metrics()["evictions"] == len(evicted_seen) == 30
    assert [float(t[0, 0]) for t in held.get_pages()] == [0.0, 1.0, 2.0, 3.0, 4.0]

    # Everything left is held or too recent? Shrink the budget below the held bytes:
    held_more = store.open("hot", "acme")
    store.set_budget(3 * PAGE_BYTES)
    m = store.metrics()
    assert all(store.has_pages(hot)) and m["over_budget_events"] >= 1
    assert m["bytes"] == 5 * PAGE_BYTES  # only the held pages remain
    held.close()
    held_more.close()
    store.set_budget(3 * PAGE_BYTES)  # now they are refcount 0 and go, LRU first
    assert store.metrics()["bytes"] <= 3 * PAGE_BYTES
    with pytest.raises(PagesMissingError):
        read(store, "hot", hot)


def test_spill_and_restore_after_store_actor_restart(make_store, redis_url, tmp_path):
    spill_dir = tmp_path / "spill"
    store = make_store(spill_dir=spill_dir)
    ids = pages("doc", 6)
    data = [torch.randn(3, 2, 16, 1, 8).to(torch.bfloat16) for _ in ids]
    store.put_pages(ids, data)
    store.create_context(make_record("doc", "acme", ids))
    store.put_blob("doc", "window", torch.arange(6.0))
    report = store.spill_context("doc", "acme")
    assert report["pages_written"] == 6 and report["bytes_written"] > 6 * data[0].numel() * 2
    assert store.spill_context("doc", "acme")["pages_written"] == 0  # content-addressed: once

    # Simulate a Ray restart: the store actor and every object it owned are gone; Redis is not.
    namespace = store.namespace
    store.shutdown(kill_actor=True)
    store2 = make_store(namespace=namespace, spill_dir=spill_dir)
    assert store2.metrics()["pages"] == 0
    assert store2.has_pages(ids) == [True] * 6  # restorable from disk
    with store2.open("doc", "acme") as h:
        got = h.get_pages()
        assert all(torch.equal(a, b) for a, b in zip(got, data))
        assert torch.equal(h.get_blob("window"), torch.arange(6.0))
    m = store2.metrics()
    assert m["restores"] == 6 and m["pages"] == 6 and m["tiers"]["disk"]["pages"] == 6
    assert store2.restore_context("doc", "acme") == 6
    # Deleting the context frees its pages everywhere, the disk copies included.
    store2.delete_context("doc", "acme")
    assert store2.has_pages(ids) == [False] * 6 and store2.metrics()["tiers"]["disk"]["pages"] == 0


def test_spill_on_evict_reloads_transparently(make_store):
    store = make_store(budget_bytes=4 * PAGE_BYTES, spill_on_evict=True)
    ids = pages("big", 8)
    store.put_pages(ids[:4], fill(4))
    store.create_context(make_record("a", "acme", ids[:4]))
    store.put_pages(ids[4:], fill(4, 4))  # evicts a's pages (refcount 0) to disk
    store.create_context(make_record("b", "acme", ids[4:]))
    m = store.metrics()
    assert m["evictions"] == 4 and m["spilled"] == 4 and m["bytes"] <= 4 * PAGE_BYTES
    with store.open("a", "acme") as h:
        assert [float(t[0, 0]) for t in h.get_pages()] == [0.0, 1.0, 2.0, 3.0]
    assert store.metrics()["restores"] == 4


def test_int8_store_roundtrip(make_store):
    store = make_store(quantize=True)
    ids = pages("q", 3)
    data = [torch.randn(2, 2, 32, 1, 64).to(torch.bfloat16) for _ in ids]
    store.put_pages(ids, data)
    store.create_context(make_record("q", "acme", ids))
    assert store.metrics()["bytes"] < sum(t.numel() * 2 for t in data) * 0.55  # ~half of bf16
    with store.open("q", "acme") as h:
        for a, b in zip(h.get_pages(), data):
            assert a.dtype == torch.bfloat16 and a.shape == b.shape
            assert (a.float() - b.float()).abs().max() < 0.05 * b.float().abs().max()
