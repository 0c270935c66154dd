"""DevicePageCache pin/evict behaviour and int8 page quantization accuracy (pure torch, no Ray)."""

from __future__ import annotations

import pytest
import torch

from agentctx.kv_store import DeviceCacheFullError, DevicePageCache, dequantize_page, quantize_page
from agentctx.kv_store.codec import decode_payload, encode_tensor
from agentctx.kv_store.quant import error_bound

PAGE_BYTES = 1024 * 4


def page(v: float) -> torch.Tensor:
    return torch.full((1024,), float(v))  # float32: 4 KiB


def loader(calls: list):
    def load(ids):
        calls.append(list(ids))
        return [page(float(i[1:])) for i in ids]
    return load


def test_lru_eviction_of_unpinned_pages():
    cache = DevicePageCache(3 * PAGE_BYTES)
    for i in range(3):
        cache.put(f"p{i}", page(i))
    assert cache.get("p0") is not None  # p0 becomes most recent
    cache.put("p3", page(3))
    assert "p1" not in cache and {"p0", "p2", "p3"} <= set(cache._slots)
    assert cache.stats()["evictions"] == 1 and cache.bytes_used == 3 * PAGE_BYTES


def test_pinned_pages_are_never_evicted_and_full_cache_raises():
    cache = DevicePageCache(3 * PAGE_BYTES)
    calls: list = []
    with cache.pinned(["p0", "p1", "p2"], loader(calls)) as pages:
        assert [float(t[0]) for t in pages] == [0.0, 1.0, 2.0]
        with pytest.raises(DeviceCacheFullError):
            cache.put("p9", page(9))
        assert len(cache) == 3 and cache.pinned_count("p0") == 1
    assert cache.pinned_count("p0") == 0
    cache.put("p9", page(9))  # unpinned now: p0 (LRU) goes
    assert "p0" not in cache and "p9" in cache


def test_get_many_loads_only_misses_and_pins_compose():
    cache = DevicePageCache(8 * PAGE_BYTES)
    calls: list = []
    load = loader(calls)
    cache.get_many(["p1", "p2"], load)
    cache.get_many(["p1", "p2", "p3"], load, pin=True)
    assert calls == [["p1", "p2"], ["p3"]]
    with cache.pinned(["p1"], load):
        assert cache.pinned_count("p1") == 2  # nested users
    assert cache.pinned_count("p1") == 1
    cache.unpin(["p1", "p2", "p3"])
    assert cache.stats()["pinned"] == 0 and cache.stats()["hits"] == 3


def test_failed_load_leaves_nothing_pinned():
    cache = DevicePageCache(2 * PAGE_BYTES)
    cache.put("p0", page(0))

    def boom(ids):
        raise RuntimeError("host tier unavailable")

    with pytest.raises(RuntimeError):
        cache.get_many(["p0", "p5"], boom, pin=True)
    assert cache.pinned_count("p0") == 0
    with pytest.raises(DeviceCacheFullError):
        cache.put("huge", torch.zeros(4096))  # bigger than the whole cache


def test_int8_round_trip_error_bound_and_accuracy():
    gen = torch.Generator().manual_seed(0)
    # Gemma-3-270M page shape (layers, K/V, tokens, kv_heads, head_dim), bf16.
    x = torch.randn((3, 2, 256, 1, 256), generator=gen).to(torch.bfloat16)
    x[0, 0, :, :, 7] *= 20  # an outlier key channel, as real models have
    qp = quantize_page(x)
    assert qp.q.dtype == torch.int8 and qp.scale.shape == (3, 2, 1, 1, 1)  # one scale per (layer, kv, head)
    y = dequantize_page(qp)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    err = (y.float() - x.float()).abs()
    # |error| <= scale/2 from rounding, plus bf16 re-rounding of the output (<= 2^-8 relative).
    bound = error_bound(qp) + x.float().abs() * 2 ** -8 + 1e-6
    assert bool((err <= bound).all())
    def rel_rms(a, b) -> float:
        return float(((a - b) ** 2).mean().sqrt() / (b ** 2).mean().sqrt())

    assert rel_rms(y.float()[1], x.float()[1]) < 0.0125  # 1.0 % on Gaussian heads
    assert rel_rms(y.float()[0, 0], x.float()[0, 0]) < 0.10  # 7.5 %: the outlier sets the head's scale
    # Per-channel scales fix the outlier head at the cost of more scale storage.
    per_channel = dequantize_page(quantize_page(x, reduce_axes=(-3,)))
    assert rel_rms(per_channel.float()[0, 0], x.float()[0, 0]) < 0.0125
    assert qp.nbytes < x.numel() * 2 * 0.51  # half of bf16


def test_int8_edge_cases_and_codec():
    z = torch.zeros(2, 2, 4, 1, 8, dtype=torch.float16)
    assert torch.equal(dequantize_page(quantize_page(z)), z)  # zero head: scale 1, exact zeros
    with pytest.raises(ValueError):
        quantize_page(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError):
        quantize_page(torch.arange(4))
    t = torch.randn(2, 3, 8, 1, 16)
    assert torch.allclose(decode_payload(encode_tensor(t, quantize=True)), t, atol=float(t.abs().max()) / 127)
    assert torch.equal(decode_payload(encode_tensor(t)), t)
