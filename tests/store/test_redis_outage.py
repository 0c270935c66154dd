"""Redis killed and restarted: typed, fast failures during the outage; nothing acknowledged lost."""

from __future__ import annotations

import time

import pytest
import torch

from agentctx.kv_store import StoreUnavailableError
from agentctx.kv_store.redis_directory import RedisDirectory

from .conftest import make_record, unique_ns

pytestmark = [pytest.mark.redis, pytest.mark.ray]


def _fails_fast(fn, limit_s: float = 2.0) -> StoreUnavailableError:
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError) as exc:
        fn()
    assert time.monotonic() - t0 < limit_s, "call hung instead of failing fast"
    assert exc.value.retryable and "unavailable" in str(exc.value)
    return exc.value


def test_unreachable_redis_raises_typed_error_quickly():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    d = RedisDirectory(f"redis://127.0.0.1:{port}/0", namespace=unique_ns())
    _fails_fast(d.ping)
    _fails_fast(lambda: d.get_context("c", "t"))
    _fails_fast(lambda: d.refcounts(["p"]))


def test_kill_and_restart_loses_no_acknowledged_entry(make_store, redis_server_factory):
    server = redis_server_factory()  # AOF with appendfsync always
    store = make_store(redis=server.url, lease_ttl_s=30)
    n_ctx = 20
    page_sets = []
    for k in range(n_ctx):
        ids = store.page_hashes("m", "acme", [[k, 1], [k, 2]])
        store.put_pages(ids, [torch.full((4,), float(k))] * 2)
        assert store.create_context(make_record(f"doc{k}", "acme", ids, n=k))  # acknowledged
        page_sets.append(ids)
    store.put_blob("doc0", "window", b"abc")
    held = store.open("doc1", "acme")
    assert store.refcounts(page_sets[1]) == [1, 1]

    server.kill()  # SIGKILL: no shutdown save; only what the AOF fsynced survives
    _fails_fast(lambda: store.open("doc2", "acme"))
    _fails_fast(lambda: store.refcount(page_sets[0][0]))
    _fails_fast(lambda: store.get_record("doc3", "acme"))
    _fails_fast(lambda: store.create_context(make_record("doc-new", "acme", page_sets[0])))
    _fails_fast(lambda: store.delete_context("doc4", "acme"))
    _fails_fast(store.reap_expired)
    assert held.get_pages()  # pages live in the object store; reads of a held context keep working

    server.start()  # same port and data dir: AOF replay
    for k in range(n_ctx):  # reconnection is automatic on the next call
        rec = store.get_record(f"doc{k}", "acme")
        assert rec.page_ids == page_sets[k] and rec.extra == {"n": k}
    assert store.refcounts(page_sets[1]) == [1, 1]  # the lease survived too
    assert store.get_blob("doc0", "window") == b"abc"
    assert "doc-new" not in store.list_contexts()  # the failed create left nothing behind
    with store.open("doc2", "acme") as h:
        assert [float(t[0]) for t in h.get_pages()] == [2.0, 2.0]
    assert held.renew()
    held.close()
    assert store.refcounts(page_sets[1]) == [0, 0]
    assert store.metrics()["directory"]["negative_clamps"] == 0
