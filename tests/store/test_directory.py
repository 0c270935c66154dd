"""The Directory contract, run against both backends (the Redis one is a real redis-server)."""

from __future__ import annotations

import logging
import time

import pytest

from agentctx.kv_store import (
    NO_REDIS_WARNING,
    BlobMeta,
    BlobNotFoundError,
    ContextExistsError,
    ContextNotFoundError,
    InProcessDirectory,
    InvalidInputError,
    make_directory,
)
from agentctx.kv_store.redis_directory import RedisDirectory

from .conftest import make_record, unique_ns

P = [f"{i:064x}" for i in range(1, 9)]  # page ids


@pytest.fixture(params=["inprocess", pytest.param("redis", marks=pytest.mark.redis)])
def directory(request):
    if request.param == "inprocess":
        d = InProcessDirectory()
    else:
        d = RedisDirectory(request.getfixturevalue("redis_url"), namespace=unique_ns("dir"))
    yield d
    d.close()


def test_make_directory_selects_backend(caplog, redis_url):
    with caplog.at_level(logging.WARNING):
        d = make_directory(None)
    assert isinstance(d, InProcessDirectory)
    assert NO_REDIS_WARNING in caplog.text
    assert NO_REDIS_WARNING == "no AGENTCTX_REDIS_URL: using in-process directory (not shared across processes)"
    r = make_directory(redis_url, namespace=unique_ns())
    assert isinstance(r, RedisDirectory)
    r.ping()
    r.close()


def test_create_get_and_tenant_isolation(directory):
    rec = make_record("c1", "acme", P[:3], topic="x")
    assert directory.create_context(rec) is True
    got = directory.get_context("c1", "acme")
    assert got.page_ids == P[:3] and got.token_spans == [(0, 16), (16, 32), (32, 48)]
    assert got.extra == {"topic": "x"} and got.num_tokens == 48 and got.created_at > 0
    assert directory.context_refs(P[:4]) == [1, 1, 1, 0]
    with pytest.raises(ContextNotFoundError) as wrong:
        directory.get_context("c1", "other-tenant")
    with pytest.raises(ContextNotFoundError) as absent:
        directory.get_context("nope", "acme")
    assert str(wrong.value).replace("c1", "X") == str(absent.value).replace("nope", "X")  # no existence leak
    assert directory.list_contexts() == ["c1"] and directory.list_contexts("other-tenant") == []


def test_create_is_idempotent_and_conflicts_are_rejected(directory):
    rec = make_record("c1", "acme", P[:2])
    assert directory.create_context(rec)
    assert directory.create_context(make_record("c1", "acme", P[:2])) is False
    assert directory.context_refs(P[:2]) == [1, 1]  # idempotent create doesn't double count
    with pytest.raises(ContextExistsError):
        directory.create_context(make_record("c1", "acme", P[2:4]))
    assert directory.get_context("c1", "acme").page_ids == P[:2]


@pytest.mark.parametrize("mutate", [
    dict(page_ids="notalist"), dict(token_spans=[(0, 1)]), dict(num_tokens=-1), dict(extra={"x": object()}),
    dict(context_id=""), dict(context_id="has space"), dict(tenant=""), dict(page_ids=["ok", ""]),
])
def test_bad_records_never_write(directory, mutate):
    rec = make_record("bad", "acme", P[:2])
    for k, v in mutate.items():
        setattr(rec, k, v)
    with pytest.raises(InvalidInputError):
        directory.create_context(rec)
    assert directory.list_contexts() == [] and directory.context_refs(P[:2]) == [0, 0]
    with pytest.raises(ContextNotFoundError):
        directory.get_context("bad", "acme")


def test_acquire_release_refcounts(directory, caplog):
    directory.create_context(make_record("c1", "acme", P[:3]))
    directory.create_context(make_record("c2", "acme", P[1:4]))
    directory.acquire("c1", "acme", "h1", 30)
    directory.acquire("c1", "acme", "h1", 30)  # same holder again: a renewal, not a second reference
    directory.acquire("c2", "acme", "h2", 30)
    assert directory.refcounts(P[:5]) == [1, 2, 2, 1, 0]
    assert set(directory.holders("c1")) == {"h1"}
    with pytest.raises(ContextNotFoundError):
        directory.acquire("c1", "intruder", "h3", 30)
    assert directory.release("c1", "h1").released
    with caplog.at_level(logging.WARNING):
        second = directory.release("c1", "h1")
    assert not second.released and "double release" in caplog.text
    assert directory.refcounts(P[:5]) == [0, 1, 1, 1, 0]
    assert directory.release("c2", "h2").released
    assert directory.refcounts(P[:5]) == [0] * 5
    assert directory.stats()["negative_clamps"] == 0


def test_release_reports_freeable_only_when_unused(directory):
    directory.create_context(make_record("c1", "acme", P[:2]))
    directory.acquire("c1", "acme", "h", 30)
    assert directory.release("c1", "h").freeable == []  # still listed by c1
    result = directory.delete_context("c1", "acme")
    assert result.context_removed and sorted(result.freeable) == sorted(P[:2])
    assert sorted(directory.claim_free(P[:2])) == sorted(P[:2])


def test_delete_while_held_frees_on_last_release(directory):
    directory.create_context(make_record("c1", "acme", P[:3]))
    directory.create_context(make_record("c2", "acme", P[2:4]))
    directory.acquire("c1", "acme", "h1", 30)
    directory.acquire("c1", "acme", "h2", 30)
    directory.put_blob_meta("c1", BlobMeta("win", "bytes", 3))
    res = directory.delete_context("c1", "acme")
    assert not res.context_removed and res.holders == 2 and res.freeable == []
    with pytest.raises(ContextNotFoundError):
        directory.get_context("c1", "acme")  # gone for new openers at once
    with pytest.raises(ContextNotFoundError):
        directory.acquire("c1", "acme", "h3", 30)
    with pytest.raises(ContextExistsError) as exc:
        directory.create_context(make_record("c1", "acme", P[:3]))
    assert exc.value.retryable
    assert directory.release("c1", "h1").freeable == []
    last = directory.release("c1", "h2")
    assert last.context_removed and sorted(last.freeable) == sorted(P[:2])  # P[2] still in c2
    directory.create_context(make_record("c1", "acme", P[:1]))  # id reusable now
    assert directory.list_blobs("c1") == []


def test_claims_are_conditional(directory):
    directory.create_context(make_record("c1", "acme", P[:2]))
    directory.acquire("c1", "acme", "h", 30)
    assert directory.claim_evict(P[:3]) == [P[2]]  # held pages are never evictable
    assert directory.claim_free(P[:3]) == [P[2]]  # listed or held pages are never freeable
    directory.release("c1", "h")
    assert sorted(directory.claim_evict(P[:2])) == sorted(P[:2])
    assert directory.claim_free(P[:2]) == []


def test_lease_expiry_and_reap(directory):
    directory.create_context(make_record("c1", "acme", P[:2]))
    directory.acquire("c1", "acme", "dead", 0.3)
    directory.acquire("c1", "acme", "alive", 30)
    assert directory.reap_expired().reaped == 0
    time.sleep(0.45)
    assert directory.renew("c1", "alive", 30)
    result = directory.reap_expired()
    assert result.reaped == 1 and result.freeable == []
    assert directory.refcounts(P[:2]) == [1, 1]
    assert not directory.renew("c1", "dead", 30)  # its lease is gone
    assert not directory.release("c1", "dead").released
    assert directory.refcounts(P[:2]) == [1, 1]


def test_reap_of_deleted_context_frees_pages(directory):
    directory.create_context(make_record("c1", "acme", P[:2]))
    directory.acquire("c1", "acme", "dead", 0.2)
    directory.delete_context("c1", "acme")
    time.sleep(0.3)
    result = directory.reap_expired()
    assert result.reaped == 1 and sorted(result.freeable) == sorted(P[:2]) and result.removed_contexts == ["c1"]


def test_blob_meta(directory):
    directory.create_context(make_record("c1", "acme", P[:1]))
    meta = BlobMeta("window", "tensor", 64, "bfloat16", (2, 16))
    directory.put_blob_meta("c1", meta, tenant="acme")
    assert directory.get_blob_meta("c1", "window") == meta
    assert directory.list_blobs("c1") == [meta]
    with pytest.raises(BlobNotFoundError):
        directory.get_blob_meta("c1", "nope")
    with pytest.raises(ContextNotFoundError):
        directory.get_blob_meta("c1", "window", tenant="intruder")
    with pytest.raises(ContextNotFoundError):
        directory.put_blob_meta("missing", meta)


def test_bad_ttl_rejected(directory):
    directory.create_context(make_record("c1", "acme", P[:1]))
    for ttl in (0, -1, float("inf")):
        with pytest.raises(InvalidInputError):
            directory.acquire("c1", "acme", "h", ttl)
    assert directory.refcounts(P[:1]) == [0]


def test_document_is_kept_per_tenant_and_freed_with_its_context(directory):
    directory.create_context(make_record("d1", "acme", P[:2]))
    with pytest.raises(BlobNotFoundError):
        directory.get_document("d1", "acme")  # none kept yet
    text = "Clause 1. The fee is €5 — payable\nmonthly.\n" * 50
    directory.put_document("d1", text, "acme")
    assert directory.get_document("d1", "acme") == text
    directory.put_document("d1", "", "acme")  # the no-document context keeps an empty text
    assert directory.get_document("d1", "acme") == ""
    directory.put_document("d1", text, "acme")
    for wrong in (("d1", "globex"), ("nope", "acme")):
        with pytest.raises(ContextNotFoundError):
            directory.get_document(*wrong)
        with pytest.raises(ContextNotFoundError):
            directory.put_document(wrong[0], "x", wrong[1])
    # deleted while held: the text stays until the last holder releases, then goes with the record
    directory.acquire("d1", "acme", "h1", 30.0)
    directory.delete_context("d1", "acme")
    directory.release("d1", "h1")
    directory.create_context(make_record("d1", "acme", P[:2]))  # same id again: no stale text
    with pytest.raises(BlobNotFoundError):
        directory.get_document("d1", "acme")
    directory.delete_context("d1", "acme")
    if isinstance(directory, RedisDirectory):
        assert directory.client.exists(directory.prefix + "doc:d1") == 0


def test_checkpoint_note_is_per_tenant_and_expires(directory):
    """A prefill checkpoint's note (serving/serve/checkpoint.py): overwritten in place, read only by
    its tenant, gone after its TTL or a delete."""
    directory.put_checkpoint("pf-1", "acme", '{"done": 256}', 60.0)
    directory.put_checkpoint("pf-1", "acme", '{"done": 512}', 0.3)
    assert directory.get_checkpoint("pf-1", "acme") == '{"done": 512}'
    assert directory.get_checkpoint("pf-1", "other-tenant") is None and directory.get_checkpoint("pf-2", "acme") is None
    time.sleep(0.5)
    assert directory.get_checkpoint("pf-1", "acme") is None
    directory.put_checkpoint("pf-1", "acme", "x", 60.0)
    assert directory.delete_checkpoint("pf-1", "acme") is True and directory.delete_checkpoint("pf-1", "acme") is False
    assert directory.get_checkpoint("pf-1", "acme") is None
    with pytest.raises(InvalidInputError):
        directory.put_checkpoint("pf-1", "acme", "x", 0)
