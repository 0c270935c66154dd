from __future__ import annotations

import pytest
import torch

from agentctx.retrieval.key_scorer import fuse_rankings, page_key_bounds, quest_scores, reciprocal_rank_fusion


def _true_max(q, k_pages):
    # q: (Hq, D); k_pages: (N, P, Hkv, D) -> (N, Hq) exact max_t q_h . k_t
    n, p, hkv, d = k_pages.shape
    g = q.shape[0] // hkv
    k_rep = k_pages.repeat_interleave(g, dim=2)  # (N, P, Hq, D)
    return torch.einsum("hd,nphd->nph", q, k_rep).amax(dim=1)


def test_bounds_shapes_and_values():
    k = torch.randn(5, 16, 2, 8)
    kmin, kmax = page_key_bounds(k)
    assert kmin.shape == kmax.shape == (5, 2, 8)
    assert torch.equal(kmin, k.amin(1)) and torch.all(kmin <= kmax)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2)])
def test_bound_dominates_true_max_and_best_page_ranks_first(hq, hkv):
    torch.manual_seed(0)
    n, p, d = 40, 16, 32
    k = torch.randn(n, p, hkv, d)
    q = torch.randn(hq, d)
    # Plant one key strongly aligned with q in page 23 (for every kv head).
    g = hq // hkv
    for h in range(hkv):
        k[23, 5, h] = 8.0 * q[h * g : (h + 1) * g].mean(0)
    kmin, kmax = page_key_bounds(k)
    true = _true_max(q, k)  # (N, Hq)
    # Each query head against its own KV head (h // g): (N, Hq) bounds.
    per_head = torch.stack(
        [quest_scores(q[h : h + 1], kmin[:, h // g : h // g + 1], kmax[:, h // g : h // g + 1]) for h in range(hq)],
        dim=1,
    )
    assert torch.all(per_head >= true - 1e-4)  # the bound is an upper bound, per head
    scores = quest_scores(q, kmin, kmax)
    assert scores.shape == (n,)
    assert torch.all(scores >= true.sum(1) - 1e-3)
    assert int(scores.argmax()) == 23
    assert int(quest_scores(q, kmin, kmax, reduce="max").argmax()) == 23


def test_valid_tokens_masks_padding():
    k = torch.zeros(2, 4, 1, 3)
    k[1, 3] = 100.0  # padding slot of a partial last page
    kmin, kmax = page_key_bounds(k, valid_tokens=[4, 3])
    assert float(kmax[1].max()) == 0.0
    with pytest.raises(ValueError):
        page_key_bounds(k, valid_tokens=[0, 4])


def test_shape_errors():
    with pytest.raises(ValueError):
        quest_scores(torch.randn(3, 8), torch.zeros(2, 2, 8), torch.zeros(2, 2, 8))  # 3 % 2 != 0
    with pytest.raises(ValueError):
        page_key_bounds(torch.zeros(2, 3, 4))


def test_reciprocal_rank_fusion():
    # 1 and 3 tie (1/61 + 1/63) just above 2 (2/62); ties keep first appearance.
    assert reciprocal_rank_fusion([[1, 2, 3], [3, 2, 1]]) == [1, 3, 2]
    fused = reciprocal_rank_fusion([[5, 1, 2], [1, 9, 5]])
    assert fused[0] in (1, 5) and set(fused) == {1, 2, 5, 9}
    assert fused.index(1) < fused.index(9)  # in both lists beats in one
    assert reciprocal_rank_fusion([[4, 3]], weights=[2.0]) == [4, 3]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[1]], weights=[1.0, 2.0])
    scores = torch.tensor([0.0, 5.0, 1.0, 3.0])
    out = fuse_rankings([2, 0], scores, key_top=2)
    assert set(out) == {0, 1, 2, 3} and out[0] in (1, 2)
