"""KVStore end to end on real Ray + real Redis: pages, contexts, handles, blobs, freeing."""

from __future__ import annotations

import gc
import logging
import statistics
import time

import pytest
import ray
import torch

from agentctx.kv_store import (
    ContextNotFoundError,
    DevicePageCache,
    InvalidInputError,
    KVStore,
    PageNotInContextError,
    PagesMissingError,
)

from .conftest import make_pages, make_record, put_context

pytestmark = [pytest.mark.redis, pytest.mark.ray]


def test_put_get_roundtrip_zero_copy_and_dtypes(shared_store: KVStore):
    tensors = [torch.randn(3, 2, 16, 1, 8).to(torch.bfloat16), torch.arange(12, dtype=torch.int64).reshape(3, 4),
               torch.randn(5, dtype=torch.float32), torch.zeros(0, 4, dtype=torch.float16), torch.tensor(True)]
    ids = shared_store.page_hashes("rt", "acme", [[i] for i in range(len(tensors))])
    assert shared_store.put_pages(ids, tensors) == len(tensors)
    assert shared_store.put_pages(ids, tensors) == 0  # idempotent
    shared_store.create_context(make_record("rt-ctx", "acme", ids))
    with shared_store.open("rt-ctx", "acme") as h:
        got = h.get_pages()
        for a, b in zip(got, tensors):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        # Zero-copy: two reads of one page map the same shared-memory buffer.
        assert h.get_pages(ids[:1])[0].data_ptr() == h.get_pages(ids[:1])[0].data_ptr()
        copies = h.get_pages(ids[:1], copy=True)
        copies[0].add_(1)  # a copy is writable and independent
        assert torch.equal(h.get_pages(ids[:1])[0], tensors[0])


def test_prefix_sharing_dedupes_and_tenants_never_share(make_store):
    store = make_store()
    doc_a = [[1, 2], [3, 4], [5, 6], [7, 8]]
    doc_b = doc_a[:3] + [[9, 9]]
    ids_a = put_context(store, "a", "t1", doc_a)
    ids_b = store.page_hashes("m", "t1", doc_b)
    assert store.has_pages(ids_b) == [True, True, True, False]  # prefix reuse before prefill
    assert store.put_pages(ids_b, make_pages(4, seed=1)) == 1
    store.create_context(make_record("b", "t1", ids_b))
    assert store.metrics()["pages"] == 5
    ids_other = put_context(store, "a2", "t2", doc_a)  # same document, another tenant
    assert not set(ids_other) & set(ids_a)
    m = store.metrics()
    assert m["pages"] == 9 and m["put_dedup"] == 0
    # Tenant t2 can't open t1's context, nor read t1's pages through its own handle.
    with pytest.raises(ContextNotFoundError):
        store.open("a", "t2")
    with store.open("a2", "t2") as h, pytest.raises(PageNotInContextError):
        h.get_pages(ids_a[:1])


def test_create_context_requires_pages_and_validates(shared_store: KVStore):
    ids = shared_store.page_hashes("m", "acme", [[101], [102]])
    with pytest.raises(PagesMissingError) as exc:
        shared_store.create_context(make_record("needs-pages", "acme", ids))
    assert set(exc.value.page_ids) == set(ids)
    with pytest.raises(InvalidInputError):
        shared_store.put_pages(ids, [torch.zeros(1)])  # count mismatch
    with pytest.raises(InvalidInputError):
        shared_store.put_pages(ids, [torch.zeros(1), "not a tensor"])
    assert shared_store.has_pages(ids) == [False, False]  # bad input wrote nothing
    with pytest.raises(ContextNotFoundError):
        shared_store.open("needs-pages", "acme")


def test_handle_refcounts_close_gc_and_double_release(shared_store: KVStore, caplog):
    ids = put_context(shared_store, "rc-ctx", "acme", [[201], [202]])
    h1 = shared_store.open("rc-ctx", "acme")
    h2 = shared_store.open("rc-ctx", "acme")
    assert shared_store.refcounts(ids) == [2, 2] and len(shared_store.holders("rc-ctx")) == 2
    h1.close()
    h1.close()  # idempotent
    assert shared_store.refcounts(ids) == [1, 1]
    holder = h2.holder_id
    del h2
    gc.collect()
    assert shared_store.refcounts(ids) == [0, 0]  # released by the garbage collector
    with caplog.at_level(logging.WARNING):
        assert shared_store.release("rc-ctx", holder) is False
    assert "double release" in caplog.text and shared_store.refcounts(ids) == [0, 0]
    assert shared_store.metrics()["directory"]["negative_clamps"] == 0


def test_delete_frees_unshared_pages_now_and_held_ones_on_last_release(make_store):
    store = make_store()
    ids1 = put_context(store, "c1", "acme", [[1], [2], [3]])
    ids2 = put_context(store, "c2", "acme", [[1], [2], [4]])  # shares two pages with c1
    res = store.delete_context("c2", "acme")
    assert res.context_removed and res.freeable == [ids2[2]]
    assert store.has_pages(ids1 + ids2[2:]) == [True, True, True, False]
    h = store.open("c1", "acme")
    store.delete_context("c1", "acme")
    assert store.has_pages(ids1) == [True] * 3  # still held: nothing freed yet
    assert [t.shape for t in h.get_pages()] == [torch.Size((2, 2, 16, 1, 8))] * 3
    with pytest.raises(ContextNotFoundError):
        store.open("c1", "acme")
    h.close()
    deadline = time.monotonic() + 5
    while any(store.has_pages(ids1)) and time.monotonic() < deadline:
        time.sleep(0.02)  # the free is a fire-and-forget message to the actor
    assert store.has_pages(ids1) == [False] * 3
    assert store.metrics()["frees"] == 4


def _wait_freed(store: KVStore, ids: list[str], timeout_s: float = 5.0) -> list[bool]:
    deadline = time.monotonic() + timeout_s
    while any(store.has_pages(ids)) and time.monotonic() < deadline:
        time.sleep(0.02)  # frees after a release are fire-and-forget messages to the actor
    return store.has_pages(ids)


def test_hold_pages_keeps_them_until_release_or_expiry(make_store):
    """A hold (what a prefill checkpoint keeps its pages by): rc 1 and no context ref while held,
    not evicted under budget pressure; freed on release, or by the reaper once its lease expires,
    except pages a context lists."""
    store = make_store(budget_bytes=16 << 10)  # 16 pages of 1 KiB
    ids = store.page_hashes("m", "acme", [[1], [2], [3]])
    store.put_pages(ids, make_pages(3))
    store.hold_pages("hold-a", "acme", ids[:2], "prefill-x", 60.0)
    assert store.refcounts(ids) == [1, 1, 0] and store.directory.context_refs(ids) == [0, 0, 0]
    assert "hold-a" not in store.list_contexts()
    store.put_pages(store.page_hashes("m", "acme", [[i] for i in range(10, 60)]), make_pages(50, seed=1))
    assert store.has_pages(ids) == [True, True, False]  # over budget: the unheld page went, held ones stay
    assert store.release("hold-a", "prefill-x")
    assert _wait_freed(store, ids[:2]) == [False, False]
    # Expiry: the reaper releases the lease and frees what no context lists.
    ids = store.page_hashes("m", "acme", [[4], [5]])
    store.put_pages(ids, make_pages(2))
    store.create_context(make_record("lists-5", "acme", ids[1:]))
    store.hold_pages("hold-b", "acme", ids, "prefill-y", 0.5)
    time.sleep(0.7)
    assert store.reap_expired() >= 1
    assert store.has_pages(ids) == [False, True] and store.refcounts(ids) == [0, 0]
    with pytest.raises(PagesMissingError):
        store.hold_pages("hold-c", "acme", ids, "prefill-z", 5.0)


def test_blobs_are_stored_per_context_and_tenant_checked(shared_store: KVStore):
    put_context(shared_store, "blob-ctx", "acme", [[301]])
    window = torch.randn(2, 64, 8).to(torch.bfloat16)
    shared_store.put_blob("blob-ctx", "window_kv", window)
    shared_store.put_blob("blob-ctx", "meta", b"\x00\x01raw")
    assert torch.equal(shared_store.get_blob("blob-ctx", "window_kv"), window)
    with shared_store.open("blob-ctx", "acme") as h:
        assert h.get_blob("meta") == b"\x00\x01raw"
    with pytest.raises(ContextNotFoundError):
        shared_store.get_blob("blob-ctx", "meta", tenant="intruder")
    with pytest.raises(ContextNotFoundError):
        shared_store.put_blob("no-such-ctx", "x", b"1")
    with pytest.raises(InvalidInputError):
        shared_store.put_blob("blob-ctx", "x", 123)


@ray.remote(num_cpus=0)
class Reader:
    """An agent that receives only ids (or a pickled handle) and opens the context itself."""

    def open_by_id(self, context_id, tenant, redis_url, namespace):
        t0 = time.perf_counter()
        handle = KVStore.attach(context_id, tenant, redis_url=redis_url, namespace=namespace)
        first_ms = (time.perf_counter() - t0) * 1000
        sums = [float(p.float().sum()) for p in handle.get_pages()]
        lat = []
        for _ in range(30):
            t0 = time.perf_counter()
            h = KVStore.attach(context_id, tenant, redis_url=redis_url, namespace=namespace)
            lat.append((time.perf_counter() - t0) * 1000)
            h.close()
        handle.close()
        return sums, first_ms, lat

    def read_handle(self, handle):
        out = [float(p.float().sum()) for p in handle.get_pages()]
        holder = handle.holder_id
        handle.close()
        return out, holder


def test_agents_attach_by_id_and_by_pickled_handle(shared_store: KVStore):
    ids = put_context(shared_store, "shared-doc", "acme", [[401], [402], [403]])
    with shared_store.open("shared-doc", "acme") as mine:
        expected = [float(p.float().sum()) for p in mine.get_pages()]
        reader = Reader.remote()
        sums, first_ms, lat = ray.get(reader.open_by_id.remote("shared-doc", "acme", shared_store.redis_url,
                                                               shared_store.namespace))
        assert sums == expected
        assert statistics.median(lat) < 50, lat  # reattach from id on CPU
        got, holder = ray.get(reader.read_handle.remote(mine))
        assert got == expected and holder != mine.holder_id  # the receiver held its own reference
        assert shared_store.refcounts(ids) == [1, 1, 1]
        ray.kill(reader)


def test_reattach_latency_in_driver(shared_store: KVStore):
    put_context(shared_store, "lat-doc", "acme", [[i] for i in range(512)])  # 128K tokens at 256/page
    lat = []
    for _ in range(50):
        t0 = time.perf_counter()
        h = shared_store.open("lat-doc", "acme", auto_renew=False)
        lat.append((time.perf_counter() - t0) * 1000)
        h.close()
    assert statistics.median(lat) < 50 and max(lat) < 250, lat


def test_in_process_directory_shared_through_actor(make_store, caplog):
    with caplog.at_level(logging.WARNING):
        store = make_store(redis=False)
    assert "no AGENTCTX_REDIS_URL: using in-process directory" in caplog.text
    ids = put_context(store, "ip", "acme", [[1], [2]])
    reader = Reader.remote()
    with store.open("ip", "acme") as h:
        assert store.refcounts(ids) == [1, 1]
        got, _ = ray.get(reader.read_handle.remote(h))
        assert got == [float(p.float().sum()) for p in h.get_pages()]
    ray.kill(reader)
    assert store.refcounts(ids) == [0, 0]
    assert store.metrics()["backend"] == "inprocess"
    store.delete_context("ip", "acme")
    assert store.has_pages(ids) == [False, False]


def test_metrics_shape(shared_store: KVStore):
    ids = put_context(shared_store, "m-doc", "acme", [[501], [502]])
    with shared_store.open("m-doc", "acme") as h:
        h.get_pages()
        m = shared_store.metrics()
    for key in ("pages", "bytes", "hits", "misses", "evictions", "frees", "refcount_histogram", "tiers"):
        assert key in m
    assert m["tiers"]["host"]["bytes"] == m["bytes"] >= 2 * 2 * 2 * 16 * 8 * 2
    assert m["refcount_histogram"].get("1", 0) >= len(ids)
    assert m["hits"] >= 2
    cache = DevicePageCache(1 << 20)
    with shared_store.open("m-doc", "acme") as h:
        with cache.pinned(ids, h.get_pages):
            device = shared_store.metrics(device_caches=[cache])["tiers"]["device"]
    assert device["pages"] == 2 and device["pinned"] == 2 and device["misses"] == 2
