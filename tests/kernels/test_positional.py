"""Positional (causal / sliding) attention with LSE against a plain dense reference."""

from __future__ import annotations

import math

import pytest
import torch

from agentctx.kernels.merge import merge_attention
from agentctx.kernels.positional import full_attention_lse, masked_attention_lse, sliding_window_attention


def _dense(q, k, v, mask, scale):
    g = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(g, 1).double(), v.repeat_interleave(g, 1).double()
    s = torch.einsum("qhd,khd->hqk", q.double(), kr) * scale
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, vr), lse.transpose(0, 1)


@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2), (4, 4)])
@pytest.mark.parametrize("window", [None, 5, 64])
def test_masked_matches_dense(hq, hkv, window):
    torch.manual_seed(0)
    tk, tq, d = 40, 9, 16
    q, k, v = torch.randn(tq, hq, d), torch.randn(tk, hkv, d), torch.randn(tk, hkv, d)
    kpos = torch.arange(tk)
    qpos = torch.arange(tk - tq, tk)
    mask = kpos[None] <= qpos[:, None]
    if window:
        mask &= kpos[None] > qpos[:, None] - window
    out, lse = masked_attention_lse(q, k, v, qpos, kpos, 1 / math.sqrt(d), window=window)
    ref_o, ref_l = _dense(q, k, v, mask.unsqueeze(0).expand(hq, -1, -1), 1 / math.sqrt(d))
    torch.testing.assert_close(out.double(), ref_o, atol=1e-5, rtol=0)
    torch.testing.assert_close(lse.double(), ref_l, atol=1e-5, rtol=0)


def test_split_prefix_plus_local_equals_causal():
    torch.manual_seed(1)
    d, n_prev, t = 32, 70, 10
    q = torch.randn(t, 4, d)
    k, v = torch.randn(n_prev + t, 2, d), torch.randn(n_prev + t, 2, d)
    pos = torch.arange(n_prev, n_prev + t)
    o1, l1 = full_attention_lse(q, k[:n_prev], v[:n_prev], 0.2)
    o2, l2 = masked_attention_lse(q, k[n_prev:], v[n_prev:], pos, pos, 0.2)
    merged, _ = merge_attention(o1, l1, o2, l2)
    whole, _ = masked_attention_lse(q, k, v, pos, torch.arange(n_prev + t), 0.2)
    torch.testing.assert_close(merged, whole, atol=1e-5, rtol=0)


def test_empty_keys_give_minus_inf():
    q = torch.randn(3, 2, 8)
    out, lse = full_attention_lse(q, torch.empty(0, 1, 8), torch.empty(0, 1, 8), 0.3)
    assert torch.isneginf(lse).all() and (out == 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("hq,hkv,d", [(4, 1, 256), (32, 8, 128)])
def test_cuda_fused_paths_match_reference(hq, hkv, d):
    torch.manual_seed(2)
    n_prev, t = 3000, 300
    q = torch.randn(t, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(n_prev + t, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    pos = torch.arange(n_prev, n_prev + t, device="cuda")
    scale = 1 / math.sqrt(d)
    for fused, ref in [
        (full_attention_lse(q, k[:n_prev], v[:n_prev], scale),
         full_attention_lse(q.cpu().float(), k[:n_prev].cpu().float(), v[:n_prev].cpu().float(), scale)),
        (masked_attention_lse(q, k[n_prev:], v[n_prev:], pos, pos, scale),
         masked_attention_lse(q.cpu().float(), k[n_prev:].cpu().float(), v[n_prev:].cpu().float(),
                              pos.cpu(), pos.cpu().clone(), scale)),
    ]:
        o, l = fused
        err = (o.float().cpu() - ref[0]).norm() / ref[0].norm()
        assert err < 1e-2  # bf16 operands
        assert (l.cpu() - ref[1]).abs().max() < 5e-2


@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2)])
@pytest.mark.parametrize("window,n_prev,t,block", [(16, 0, 50, None), (16, 16, 50, None), (16, 7, 40, 5),
                                                   (64, 64, 30, None), (8, 8, 8, 3)])
def test_sliding_window_bands_match_dense(hq, hkv, window, n_prev, t, block):
    """Band-by-band sliding attention (prefill) equals the dense masked reference."""
    torch.manual_seed(3)
    d, start = 16, 100
    q = torch.randn(t, hq, d)
    k, v = torch.randn(n_prev + t, hkv, d), torch.randn(n_prev + t, hkv, d)
    qpos = torch.arange(start, start + t)
    kpos = torch.arange(start - n_prev, start + t)
    mask = (kpos[None] <= qpos[:, None]) & (kpos[None] > qpos[:, None] - window)
    ref, _ = _dense(q, k, v, mask.unsqueeze(0).expand(hq, -1, -1), 0.25)
    got = sliding_window_attention(q, k, v, start, start - n_prev, 0.25, window, block=block)
    torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=0)
    # softcap takes the explicit path and agrees with the square masked one
    capped = sliding_window_attention(q, k, v, start, start - n_prev, 0.25, window, softcap=2.0, block=block)
    square, _ = masked_attention_lse(q, k, v, qpos, kpos, 0.25, window=window, softcap=2.0)
    torch.testing.assert_close(capped, square, atol=1e-5, rtol=0)


def test_sliding_window_rejects_misaligned_keys():
    q, k = torch.randn(4, 2, 8), torch.randn(6, 1, 8)
    with pytest.raises(ValueError, match="must end with the queries"):
        sliding_window_attention(q, k, k, 10, 5, 0.3, 4)


@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2)])
def test_fused_cpu_paths_match_dense(hq, hkv):
    """Full (prefix) and square causal attention through the fused kernel, with their LSE."""
    torch.manual_seed(4)
    d, n_prev, t = 32, 300, 40
    q = torch.randn(t, hq, d)
    k, v = torch.randn(n_prev + t, hkv, d), torch.randn(n_prev + t, hkv, d)
    pos = torch.arange(n_prev, n_prev + t)
    o, l = full_attention_lse(q, k[:n_prev], v[:n_prev], 0.2)
    ro, rl = _dense(q, k[:n_prev], v[:n_prev], torch.ones(hq, t, n_prev, dtype=torch.bool), 0.2)
    torch.testing.assert_close(o.double(), ro, atol=1e-5, rtol=0)
    torch.testing.assert_close(l.double(), rl, atol=1e-5, rtol=0)
    o, l = masked_attention_lse(q, k[n_prev:], v[n_prev:], pos, pos, 0.2)
    causal = pos[None] <= pos[:, None]
    ro, rl = _dense(q, k[n_prev:], v[n_prev:], causal.unsqueeze(0).expand(hq, -1, -1), 0.2)
    torch.testing.assert_close(o.double(), ro, atol=1e-5, rtol=0)
    torch.testing.assert_close(l.double(), rl, atol=1e-5, rtol=0)
