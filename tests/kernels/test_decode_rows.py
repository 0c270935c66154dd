"""Batched one-token decode attention (kernels/decode_rows.py) against per-row attention over
each row's visible keys (positional.masked_attention_with_mask, itself tested against dense)."""

from __future__ import annotations

import math

import pytest
import torch

from agentctx.kernels.decode_rows import attend_rows, attend_rows_shared
from agentctx.kernels.positional import masked_attention_with_mask


def _per_row(q, k_rows, v_rows, valid, scale, softcap):
    """Row b alone over its visible keys; (out, lse) stacked."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        keep = valid[b]
        o, l = masked_attention_with_mask(q[b : b + 1], k_rows[b][keep], v_rows[b][keep],
                                          torch.ones(1, int(keep.sum()), dtype=torch.bool), scale, softcap)
        outs.append(o[0])
        lses.append(l[0])
    return torch.stack(outs), torch.stack(lses)


def _valid(b, length, seed):
    g = torch.Generator().manual_seed(seed)
    valid = torch.rand(b, length, generator=g) < 0.7
    valid[:, 0] = True  # every row sees something (the empty row has a test of its own)
    return valid


@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2), (4, 4)])
@pytest.mark.parametrize("softcap", [None, 20.0])
def test_attend_rows_equals_each_row_alone(hq, hkv, softcap):
    torch.manual_seed(0)
    b, length, d = 5, 37, 16
    q, k, v = torch.randn(b, hq, d), torch.randn(b, length, hkv, d), torch.randn(b, length, hkv, d)
    valid = _valid(b, length, 1)
    out, lse = attend_rows(q, k, v, valid, 1 / math.sqrt(d), softcap)
    ref_o, ref_l = _per_row(q, k, v, valid, 1 / math.sqrt(d), softcap)
    torch.testing.assert_close(out, ref_o, atol=1e-5, rtol=0)
    torch.testing.assert_close(lse, ref_l, atol=1e-5, rtol=0)


@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2)])
@pytest.mark.parametrize("softcap", [None, 20.0])
def test_attend_rows_shared_equals_each_row_alone(hq, hkv, softcap):
    torch.manual_seed(1)
    b, length, d = 6, 50, 16
    q, k, v = torch.randn(b, hq, d), torch.randn(length, hkv, d), torch.randn(length, hkv, d)
    valid = _valid(b, length, 2)
    out, lse = attend_rows_shared(q, k, v, valid, 0.3, softcap)
    ref_o, ref_l = _per_row(q, [k] * b, [v] * b, valid, 0.3, softcap)
    torch.testing.assert_close(out, ref_o, atol=1e-5, rtol=0)
    torch.testing.assert_close(lse, ref_l, atol=1e-5, rtol=0)
    # The same keys given to every row explicitly: the same result.
    o2, l2 = attend_rows(q, k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1), valid, 0.3, softcap)
    torch.testing.assert_close(out, o2, atol=1e-6, rtol=0)
    torch.testing.assert_close(lse, l2, atol=1e-6, rtol=0)


def test_a_row_that_sees_nothing_gives_zero_and_minus_inf():
    torch.manual_seed(2)
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 10, 2, 8), torch.randn(3, 10, 2, 8)
    valid = torch.ones(3, 10, dtype=torch.bool)
    valid[1] = False
    for out, lse in (attend_rows(q, k, v, valid, 0.5), attend_rows_shared(q, k[0], v[0], valid, 0.5)):
        assert torch.equal(out[1], torch.zeros(4, 8)) and bool(torch.isneginf(lse[1]).all())
        assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse[[0, 2]]).all())


def test_half_inputs_compute_in_fp32_and_return_their_dtype():
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 12, 1, 8), torch.randn(2, 12, 1, 8)
    valid = torch.ones(2, 12, dtype=torch.bool)
    out, lse = attend_rows(q.bfloat16(), k.bfloat16(), v.bfloat16(), valid, 0.5)
    ref, _ = attend_rows(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), valid, 0.5)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=0)


def test_bad_shapes_are_refused():
    q, k = torch.randn(2, 4, 8), torch.randn(2, 5, 3, 8)  # 4 heads over 3 KV heads
    with pytest.raises(ValueError, match="Hq % Hkv"):
        attend_rows(q, k, k, torch.ones(2, 5, dtype=torch.bool), 1.0)
    k = torch.randn(2, 5, 2, 8)
    with pytest.raises(ValueError, match="valid must be bool"):
        attend_rows(q, k, k, torch.ones(2, 4, dtype=torch.bool), 1.0)
    with pytest.raises(ValueError, match="valid must be bool"):
        attend_rows_shared(q, k[0], k[0], torch.ones(2, 5), 1.0)
