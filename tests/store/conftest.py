"""Store-suite fixtures: unique namespaces, stores that are torn down, synthetic pages."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import torch

from agentctx.kv_store import ContextRecord, KVStore


def unique_ns(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_pages(n: int, shape: tuple[int, ...] = (2, 2, 16, 1, 8), seed: int = 0,
               dtype: torch.dtype = torch.bfloat16) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(dtype) for _ in range(n)]


def make_record(context_id: str, tenant: str, page_ids: list[str], model_id: str = "m",
                page_tokens: int = 16, **extra) -> ContextRecord:
    spans = [(i * page_tokens, (i + 1) * page_tokens) for i in range(len(page_ids))]
    return ContextRecord(context_id=context_id, tenant=tenant, model_id=model_id, dtype="bfloat16",
                         page_ids=list(page_ids), token_spans=spans, char_spans=[],
                         num_tokens=len(page_ids) * page_tokens, extra=dict(extra))


def put_context(store: KVStore, context_id: str, tenant: str, token_pages: list[list[int]],
                model_id: str = "m", seed: int = 0) -> list[str]:
    """Hash, put and register a context; returns its page ids."""
    ids = store.page_hashes(model_id, tenant, token_pages)
    store.put_pages(ids, make_pages(len(ids), seed=seed))
    store.create_context(make_record(context_id, tenant, ids, model_id=model_id))
    return ids


@pytest.fixture
def make_store(ray_local, redis_url, tmp_path) -> Iterator[Callable[..., KVStore]]:
    """``make_store(**connect_kwargs)``: a store on a fresh namespace; its actor is killed afterwards."""
    stores: list[KVStore] = []

    def make(redis: bool | str = True, **kwargs) -> KVStore:
        """``redis``: True for the session server, False for the in-process directory, or a URL."""
        kwargs.setdefault("namespace", unique_ns())
        kwargs.setdefault("spill_dir", tmp_path / f"spill-{kwargs['namespace']}")
        url = redis if isinstance(redis, str) else (redis_url if redis else "")
        store = KVStore.connect(url, **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.shutdown(kill_actor=True)


@pytest.fixture(scope="module")
def shared_store(ray_local, redis_url, tmp_path_factory) -> Iterator[KVStore]:
    """One Redis-backed store per module for tests that only need unique context ids."""
    store = KVStore.connect(redis_url, namespace=unique_ns("mod"), lease_ttl_s=30.0,
                            spill_dir=tmp_path_factory.mktemp("spill"))
    yield store
    store.shutdown(kill_actor=True)
