"""kernels/union_attend.py on CPU: the union tables the engine builds, the reference against row-by-row
page attention, and the launcher's input checks (the Triton kernel: test_triton_interpret, GPU)."""

from __future__ import annotations

import pytest
import torch

from agentctx.kernels import attend_selected
from agentctx.kernels.union_attend import attend_union, union_tables


def test_union_tables_hold_each_rows_plan():
    union, bits = union_tables([(0, 3, 5), None, (3, 9), (5,)], 10)
    assert union == [0, 3, 5, 9]
    assert bits == [0b0001, 0b0101, 0b1001, 0b0100]
    # Row 63 is int64's sign bit: stored negative, still that row's bit.
    _, top = union_tables([()] * 63 + [(2,)], 4)
    assert top == [-(1 << 63)] and (top[0] >> 63) & 1 == 1
    with pytest.raises(ValueError, match="at most 64"):
        union_tables([(0,)] * 65, 4)
    with pytest.raises(ValueError, match="out of range"):
        union_tables([(4,)], 4)


def test_reference_equals_each_rows_own_pages():
    g = torch.Generator().manual_seed(0)
    s, p, hkv, d = 12, 16, 2, 32
    k, v = torch.randn(s, p, hkv, d, generator=g), torch.randn(s, p, hkv, d, generator=g)
    lens = torch.full((s,), p, dtype=torch.int32)
    lens[-1] = 5
    q = torch.randn(3, 8, d, generator=g)
    plans = [(0, 4, 11), (4, 7), tuple(range(s))]
    union, bits = union_tables(plans, s)
    args = (q, k, v, torch.tensor(union + [0, 0], dtype=torch.int32), torch.tensor([len(union)], dtype=torch.int32),
            torch.tensor(bits + [-1, -1]), lens)
    out, lse = attend_union(*args, 0.2)
    for i, plan in enumerate(plans):
        bt = torch.tensor([plan], dtype=torch.int32)
        o, l = attend_selected(q[i : i + 1].unsqueeze(1), k, v, bt, torch.tensor([len(plan)], dtype=torch.int32),
                               lens, 0.2, impl="torch")
        torch.testing.assert_close(out[i], o[0, 0])
        torch.testing.assert_close(lse[i], l[0, 0])
    with pytest.raises(ValueError, match="row_bits"):
        attend_union(q, k, v, args[3], args[4], args[5].int(), lens, 0.2)
    with pytest.raises(ValueError, match="at most 64 rows"):
        attend_union(torch.randn(65, 8, d), k, v, *args[3:], 0.2)
    with pytest.raises(ValueError, match="impl"):
        attend_union(*args, 0.2, impl="cuda")
