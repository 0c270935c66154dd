"""Exact LSE merge of partial attentions (kernels.merge)."""

from __future__ import annotations

import random

import pytest
import torch

from agentctx.kernels import attend_selected, dense_attention_reference, merge_attention, merge_many

from ._cases import assert_close_attention, make_case


def _random_groups(n_keys: int, n_groups: int, rng: random.Random, allow_empty: bool) -> list[torch.Tensor]:
    """Random disjoint (non-contiguous) partition of range(n_keys) into n_groups index sets."""
    labels = [rng.randrange(n_groups) for _ in range(n_keys)]
    if not allow_empty:
        for g in range(n_groups):  # make sure each group gets at least one key
            labels[g] = g
    return [torch.tensor([i for i, l in enumerate(labels) if l == g], dtype=torch.long) for g in range(n_groups)]


@pytest.mark.parametrize("n_groups", [2, 3, 4])
@pytest.mark.parametrize("softcap", [None, 10.0])
@pytest.mark.parametrize("allow_empty", [False, True])
def test_merge_of_disjoint_groups_equals_full(n_groups, softcap, allow_empty):
    rng = random.Random(n_groups * 7 + bool(softcap) + 2 * allow_empty)
    g = torch.Generator().manual_seed(rng.randrange(1000))
    B, T, Tq, Hq, Hkv, D = 2, 50, 3, 8, 2, 32
    q = torch.randn(B, Tq, Hq, D, generator=g)
    k = torch.randn(B, T, Hkv, D, generator=g) * 2
    v = torch.randn(B, T, Hkv, D, generator=g)
    full = dense_attention_reference(q, k, v, 0.2, softcap=softcap)
    groups = _random_groups(T, n_groups, rng, allow_empty)
    if allow_empty:
        groups.append(torch.tensor([], dtype=torch.long))  # always include one empty partial
    parts = [dense_attention_reference(q, k[:, idx], v[:, idx], 0.2, softcap=softcap) for idx in groups]
    out, lse = merge_many([p[0] for p in parts], [p[1] for p in parts])
    torch.testing.assert_close(out, full[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full[1], atol=1e-5, rtol=1e-5)
    # Pairwise left fold gives the same answer.
    acc = parts[0]
    for p in parts[1:]:
        acc = merge_attention(acc[0], acc[1], p[0], p[1])
    torch.testing.assert_close(acc[0], full[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(acc[1], full[1], atol=1e-5, rtol=1e-5)


def test_merge_with_empty_side_is_identity():
    g = torch.Generator().manual_seed(1)
    out = torch.randn(2, 3, 4, 8, generator=g)
    lse = torch.randn(2, 3, 4, generator=g)
    empty_out = torch.zeros_like(out)
    empty_lse = torch.full_like(lse, float("-inf"))
    for o, l in (merge_attention(out, lse, empty_out, empty_lse), merge_attention(empty_out, empty_lse, out, lse)):
        torch.testing.assert_close(o, out)
        torch.testing.assert_close(l, lse)


def test_merge_both_empty_gives_zero_and_neg_inf_without_nan():
    out = torch.full((2, 4, 8), 123.0)  # garbage in an empty partial is ignored
    lse = torch.full((2, 4), float("-inf"))
    o, l = merge_attention(out, lse, out, lse)
    assert torch.all(o == 0) and torch.all(torch.isneginf(l))
    o, l = merge_many([out, out, out], [lse, lse, lse])
    assert torch.all(o == 0) and torch.all(torch.isneginf(l))


def test_merge_mixed_empty_rows():
    """Per-element -inf: some rows empty on one side, some on both."""
    out_a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    lse_a = torch.tensor([0.0, float("-inf"), float("-inf")])
    out_b = torch.tensor([[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]])
    lse_b = torch.tensor([float("-inf"), 1.5, float("-inf")])
    o, l = merge_attention(out_a, lse_a, out_b, lse_b)
    torch.testing.assert_close(o, torch.tensor([[1.0, 2.0], [9.0, 10.0], [0.0, 0.0]]))
    assert l[0] == 0.0 and l[1] == 1.5 and torch.isneginf(l[2])


def test_merge_extreme_lse_no_overflow():
    out_a, out_b = torch.ones(1, 4), torch.full((1, 4), 3.0)
    lse_a, lse_b = torch.tensor([1000.0]), torch.tensor([1000.0])
    o, l = merge_attention(out_a, lse_a, out_b, lse_b)
    torch.testing.assert_close(o, torch.full((1, 4), 2.0))
    torch.testing.assert_close(l, torch.tensor([1000.0 + 0.6931471805599453]))
    o, l = merge_attention(out_a, torch.tensor([-1000.0]), out_b, torch.tensor([0.0]))
    torch.testing.assert_close(o, out_b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_merge_keeps_out_dtype_and_float32_lse(dtype):
    out = torch.randn(3, 8).to(dtype)
    lse = torch.randn(3)
    o, l = merge_attention(out, lse, out, lse)
    assert o.dtype == dtype and l.dtype == torch.float32
    torch.testing.assert_close(o, out)
    torch.testing.assert_close(l, lse + 0.6931471805599453)


def test_merge_shape_errors():
    with pytest.raises(ValueError, match="same leading dims"):
        merge_attention(torch.zeros(2, 3, 8), torch.zeros(2, 4), torch.zeros(2, 3, 8), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="out shapes differ"):
        merge_attention(torch.zeros(2, 8), torch.zeros(2), torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="same non-zero number"):
        merge_many([], [])
    with pytest.raises(ValueError, match="same non-zero number"):
        merge_many([torch.zeros(2, 8)], [])


def test_merge_selected_page_subsets_equals_all_pages():
    """The production use: attention over two disjoint page sets merged == attention over their union."""
    case = make_case(B=2, Tq=4, Hq=8, Hkv=2, D=64, P=16, pages=[6, 5], seed=21)
    full = attend_selected(*case.args(), impl="torch")
    bt_a = case.block_table.clone()
    bt_b = case.block_table.clone()
    nb_a = torch.tensor([2, 3], dtype=torch.int32)
    nb_b = case.num_blocks - nb_a
    for b in range(2):  # b's table = the tail of each row
        n_a = int(nb_a[b])
        bt_b[b, : int(nb_b[b])] = case.block_table[b, n_a : int(case.num_blocks[b])]
        bt_b[b, int(nb_b[b]) :] = -1
    part_a = attend_selected(case.q, case.k_pages, case.v_pages, bt_a, nb_a, case.slot_lens, case.scale, impl="torch")
    part_b = attend_selected(case.q, case.k_pages, case.v_pages, bt_b, nb_b, case.slot_lens, case.scale, impl="torch")
    merged = merge_attention(*part_a, *part_b)
    assert_close_attention(*merged, *full, torch.float32)
