"""Quantised pages (fp8 / int8 with their scales, issue 30) on the sharded path: a rank's shard
attends them like the engine's page kernel does (attend_selected_quant), and a 2-actor Ray group
carries each rank's slice of the scales with its pages. The reference is float32 attention over
the dequantised pages."""

from __future__ import annotations

import math

import pytest
import torch

from agentctx.kernels import attend_selected_reference
from agentctx.kernels.kv_quant import QuantPages, quantize_pages
from agentctx.serving.sharding.attention import KVShard, local_selection, pool_slice, sharded_attend

TOL = 1e-5


def _pools(S=6, P=4, Hkv=2, D=16, seed=0, dtype="int8", lens=None):
    g = torch.Generator().manual_seed(seed)
    k, v = torch.randn(S, P, Hkv, D, generator=g), torch.randn(S, P, Hkv, D, generator=g)
    k[..., 3] *= 12  # an outlier channel, as real keys have
    lens = torch.full((S,), P, dtype=torch.int32) if lens is None else lens
    kq = quantize_pages(k, dtype, part="k", slot_lens=lens)
    vq = quantize_pages(v, dtype, part="v", slot_lens=lens)
    return kq, vq, lens


@pytest.mark.parametrize("dtype", ["int8", "fp8"])
def test_one_rank_quant_shard_equals_attention_over_dequantised_pages(dtype):
    lens = torch.tensor([4, 4, 2, 4, 4, 1], dtype=torch.int32)
    kq, vq, lens = _pools(dtype=dtype, lens=lens)
    kd, vd = kq.dequantize(), vq.dequantize()
    q = torch.randn(2, 3, 4, 16, generator=torch.Generator().manual_seed(3))
    shard = KVShard(0, 6, {0: kq}, {0: vq}, lens)
    sel = shard.select([[0, 2, 5], [1, 3]], batch=2)
    ref_o, ref_l = attend_selected_reference(q, kd, vd, sel.block_table, sel.num_blocks, lens, 0.25)
    for chunks, dim in ((1, "heads"), (2, "heads"), (2, "batch"), (3, "tokens")):
        out, lse = shard.attend(0, q, sel, 0.25, impl="reference", chunks=chunks, chunk_dim=dim)
        torch.testing.assert_close(out, ref_o, atol=TOL, rtol=0)
        torch.testing.assert_close(lse, ref_l, atol=TOL, rtol=0)


def test_quant_shard_dense_reads_dequantised_tokens():
    kq, vq, lens = _pools(S=3, P=4)
    lens[-1] = 2
    shard = KVShard(0, 3, {0: kq}, {0: vq}, lens)
    k, v = shard.dense_tokens(0)
    assert k.dtype == torch.float32 and k.shape == (10, 2, 16)
    torch.testing.assert_close(k, kq.dequantize().reshape(-1, 2, 16)[:10], atol=0, rtol=0)
    q = torch.randn(5, 4, 16)
    out, lse = shard.attend_dense(0, q)
    sel = local_selection([0, 1, 2], (0, 3), batch=1)
    ref, _ = attend_selected_reference(q[None], kq.dequantize(), vq.dequantize(), sel.block_table,
                                       sel.num_blocks, lens, 1 / math.sqrt(16))
    torch.testing.assert_close(out, ref[0], atol=TOL, rtol=0)


def test_scales_slice_with_their_pages():
    kq, _, _ = _pools(S=6)
    part = pool_slice(kq, 0, 2, 5)
    assert isinstance(part, QuantPages) and part.data.shape[0] == 3 and part.scale.shape[0] == 3
    torch.testing.assert_close(part.dequantize(), kq.dequantize()[2:5], atol=0, rtol=0)
    heads = pool_slice(kq, 2, 1, 2)
    torch.testing.assert_close(heads.dequantize(), kq.dequantize()[:, :, 1:2], atol=0, rtol=0)


def test_float_keys_with_quantised_values_are_refused():
    kq, vq, lens = _pools()
    sel = local_selection([0], (0, 6), batch=1)
    with pytest.raises(ValueError, match="quantised or both float"):
        sharded_attend(torch.randn(1, 1, 4, 16), kq.dequantize(), vq, lens, sel, 0.25)


@pytest.mark.ray
def test_ray_group_carries_quantised_pages(ray_local):
    from agentctx.serving.sharding.workers import ShardedKV

    lens = torch.full((10,), 4, dtype=torch.int32)
    lens[-1] = 3
    pools = {l: _pools(S=10, seed=l, lens=lens)[:2] for l in (0, 2)}
    with pytest.raises(ValueError, match="quantised"):
        ShardedKV.create({0: pools[0][0]}, {0: pools[0][0].dequantize()}, slot_lens=lens, num_workers=2)
    kv = ShardedKV.create({l: p[0] for l, p in pools.items()}, {l: p[1] for l, p in pools.items()},
                          slot_lens=lens, num_workers=2)
    try:
        assert kv.plan.ranges == ((0, 5), (5, 10))
        q = torch.randn(2, 3, 4, 16, generator=torch.Generator().manual_seed(9))
        for layer, rows in ((0, [[0, 4, 9], [6]]), (2, [[1, 2, 3, 5, 8], [0, 9]])):
            kd, vd = pools[layer][0].dequantize(), pools[layer][1].dequantize()
            table = torch.tensor([r + [0] * (5 - len(r)) for r in rows], dtype=torch.int32)
            num = torch.tensor([len(r) for r in rows], dtype=torch.int32)
            ref_o, ref_l = attend_selected_reference(q, kd, vd, table, num, lens, 0.25)
            out, lse = kv.attend_with_lse(q, rows, layer=layer, scale=0.25, impl="reference", chunks=2)
            torch.testing.assert_close(out, ref_o, atol=TOL, rtol=0)
            torch.testing.assert_close(lse, ref_l, atol=TOL, rtol=0)
    finally:
        kv.close()
