"""ShardedKV through a real Ray actor group (2 actors, num_cpus=0, gloo) equals unsharded attention."""

from __future__ import annotations

import math

import pytest
import torch

from agentctx.kernels import attend_selected_reference

pytestmark = pytest.mark.ray

TOL = 1e-5


def _reference(q, k, v, lens, rows, scale):
    B = q.shape[0]
    M = max([1] + [len(r) for r in rows])
    table = torch.zeros(B, M, dtype=torch.int32)
    for i, r in enumerate(rows):
        table[i, : len(r)] = torch.tensor(sorted(r), dtype=torch.int32)
    num = torch.tensor([len(r) for r in rows], dtype=torch.int32)
    return attend_selected_reference(q, k, v, table, num, lens, scale)


def test_sharded_kv_ray_group(ray_local):
    from agentctx.serving.sharding.workers import ShardedKV

    g = torch.Generator().manual_seed(11)
    S, P, Hkv, D, Hq = 10, 4, 2, 16, 8
    layers = {0: (torch.randn(S, P, Hkv, D, generator=g), torch.randn(S, P, Hkv, D, generator=g)),
              3: (torch.randn(S, P, Hkv, D, generator=g), torch.randn(S, P, Hkv, D, generator=g))}
    lens = torch.full((S,), P, dtype=torch.int32)
    lens[-1] = 3
    scale = 1.0 / math.sqrt(D)
    kv = ShardedKV.create({l: kv_[0] for l, kv_ in layers.items()}, {l: kv_[1] for l, kv_ in layers.items()},
                          slot_lens=lens, num_workers=2)
    try:
        assert kv.plan.ranges == ((0, 5), (5, 10))  # CPU: equal ranges
        q5 = torch.randn(2, 5, Hq, D, generator=g)
        cases = [
            (0, q5, None, {}),  # every page, both ranks
            (3, q5, [[6, 9], [7]], {}),  # pages only on rank 1
            (0, q5, [[0, 2, 8], []], {"merge": "reduce", "chunks": 2}),  # a row with nothing selected
            (3, q5[:1, :1], [1, 4], {"chunks": 2}),  # Tq 1, flat list, pages only on rank 0
        ]
        for layer, q, sel, kw in cases:
            rows = [list(range(S))] * q.shape[0] if sel is None else (
                [sel] * q.shape[0] if not isinstance(sel[0], list) else sel)
            k, v = layers[layer]
            ref_o, ref_l = _reference(q, k, v, lens, rows, scale)
            out, lse = kv.attend_with_lse(q, sel, layer=layer, impl="torch", **kw)
            torch.testing.assert_close(out, ref_o, atol=TOL, rtol=0)
            fin = torch.isfinite(ref_l)
            assert torch.equal(torch.isfinite(lse), fin)
            torch.testing.assert_close(lse[fin], ref_l[fin], atol=TOL, rtol=0)
        plain = kv.attend(q5, [0, 9], layer=0)
        assert plain.shape == q5.shape
        with pytest.raises(ValueError, match="outside"):
            kv.attend(q5, [10])
    finally:
        kv.close()
    with pytest.raises(RuntimeError, match="closed"):
        kv.attend(q5)
