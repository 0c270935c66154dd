"""attend_selected (torch path), the references, dispatch and input validation (CPU)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from agentctx.kernels import attend_selected, attend_selected_reference, dense_attention_reference
from agentctx.kernels.reference import attention_core

from ._cases import TOL, assert_close_attention, dense_expected, make_case

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HEADS = [(4, 1), (8, 8), (32, 8)]
DIMS = [64, 128, 256]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("Tq", [1, 7])
@pytest.mark.parametrize("softcap", [None, 20.0])
def test_torch_matches_dense_grid(dtype, heads, D, Tq, softcap):
    """Selected pages (random order, ragged last page, B=3 with different counts) == dense over their tokens."""
    Hq, Hkv = heads
    seed = zlib.crc32(repr((dtype, Hq, Hkv, D, Tq, softcap)).encode()) % 10_000
    case = make_case(B=3, Tq=Tq, Hq=Hq, Hkv=Hkv, D=D, P=16, dtype=dtype, pages=[3, 1, 5], softcap=softcap, seed=seed)
    out, lse = attend_selected(*case.args(), softcap=softcap, impl="torch")
    ref_out, ref_lse = dense_expected(case)
    assert_close_attention(out, lse, ref_out, ref_lse, dtype)


@pytest.mark.parametrize("ragged", ["none", "last", "any"])
@pytest.mark.parametrize("pages", [[1], [7], [2, 0, 9, 4]])
def test_torch_page_counts_and_ragged(ragged, pages):
    case = make_case(B=len(pages), Tq=3, Hq=8, Hkv=2, D=64, P=32, pages=pages, ragged=ragged, seed=len(pages))
    out, lse = attend_selected(*case.args(), impl="torch")
    assert_close_attention(out, lse, *dense_expected(case), torch.float32)


def test_all_pages_in_order_equals_dense_over_concatenation():
    """The spec's headline check: select every page, in pool order."""
    S, P, Hkv, D, Hq = 6, 16, 2, 64, 8
    case = make_case(B=1, Tq=2, Hq=Hq, Hkv=Hkv, D=D, P=P, pages=[S], decoys=0, shuffle=False, ragged="last", seed=3)
    n_valid = [int(x) for x in case.slot_lens]
    k = torch.cat([case.k_pages[s, :n] for s, n in enumerate(n_valid)])[None]
    v = torch.cat([case.v_pages[s, :n] for s, n in enumerate(n_valid)])[None]
    ref = dense_attention_reference(case.q, k, v, case.scale)
    got = attend_selected(*case.args(), impl="torch")
    assert_close_attention(*got, *ref, torch.float32)


def test_empty_rows_give_zero_and_neg_inf():
    case = make_case(B=3, Tq=2, Hq=4, Hkv=1, D=64, pages=[0, 2, 0], seed=5)
    out, lse = attend_selected(*case.args(), impl="torch")
    assert torch.all(out[0] == 0) and torch.all(out[2] == 0)
    assert torch.all(torch.isneginf(lse[0])) and torch.all(torch.isneginf(lse[2]))
    assert torch.isfinite(lse[1]).all() and not torch.isnan(out).any()


def test_selected_pages_all_empty_slots():
    """Pages selected but holding zero valid tokens behave like an empty row."""
    case = make_case(B=1, Tq=1, Hq=4, Hkv=1, D=64, pages=[3], ragged="none", seed=6)
    case.slot_lens[torch.tensor(case.rows[0])] = 0
    out, lse = attend_selected(*case.args(), impl="torch")
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse))


def test_padding_garbage_is_never_read():
    """Padding entries far out of range must not be dereferenced."""
    case = make_case(B=2, pages=[2, 1], pad_value=2**31 - 1, seed=7)
    out, lse = attend_selected(*case.args(), impl="torch")
    assert_close_attention(out, lse, *dense_expected(case), torch.float32)


def test_strided_views_accepted():
    """q sliced from a larger buffer and a page pool that is one layer of a stacked pool."""
    case = make_case(B=2, Tq=3, Hq=8, Hkv=2, D=64, pages=[2, 3], seed=8)
    big_q = torch.randn(case.q.shape[0], case.q.shape[1], case.q.shape[2] * 2, case.q.shape[3])
    big_q[:, :, ::2] = case.q
    q_view = big_q[:, :, ::2]
    assert not q_view.is_contiguous()
    layers_k = torch.stack([torch.randn_like(case.k_pages), case.k_pages])  # (L, S, P, Hkv, D)
    layers_v = torch.stack([torch.randn_like(case.v_pages), case.v_pages])
    out, lse = attend_selected(q_view, layers_k[1], layers_v[1], case.block_table, case.num_blocks, case.slot_lens,
                               case.scale, impl="torch")
    assert_close_attention(out, lse, *dense_expected(case), torch.float32)


def test_auto_on_cpu_uses_torch():
    case = make_case(B=2, pages=[2, 3], seed=9)
    a = attend_selected(*case.args(), impl="auto")
    b = attend_selected(*case.args(), impl="torch")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_flash_impl_raises_not_implemented_on_cpu():
    case = make_case(B=1, pages=[1], seed=10)
    with pytest.raises(NotImplementedError, match="flash path unusable"):
        attend_selected(*case.args(), impl="flash")


def test_triton_impl_on_cpu_without_interpreter_is_a_clear_error():
    """Without CUDA (and without TRITON_INTERPRET) impl='triton' refuses instead of crashing."""
    import os

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("interpreter active in this process")
    case = make_case(B=1, pages=[1], seed=10)
    with pytest.raises(RuntimeError, match="Triton"):
        attend_selected(*case.args(), impl="triton")


def test_reference_chunking_matches_unchunked(monkeypatch):
    """Long key sets are processed in chunks and LSE-merged; forcing tiny chunks changes nothing."""
    import agentctx.kernels.reference as ref_mod

    case = make_case(B=2, Tq=3, Hq=4, Hkv=2, D=64, pages=[6, 4], seed=11)
    full = attend_selected_reference(*case.args())
    monkeypatch.setattr(ref_mod, "_MAX_SCORE_ELEMS", 3 * 4 * 10)  # ~10 keys per chunk
    chunked = attend_selected_reference(*case.args())
    torch.testing.assert_close(chunked[0], full[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(chunked[1], full[1], atol=1e-5, rtol=1e-5)


# --- the core math against independent implementations ---------------------


def _naive_attention_f64(q, k, v, scale, softcap=None):
    """Literal float64 loops over heads: softmax(scale * q k^T [capped]) v."""
    B, Tq, Hq, D = q.shape
    Hkv = k.shape[2]
    g = Hq // Hkv
    out = torch.zeros(B, Tq, Hq, D, dtype=torch.float64)
    lse = torch.zeros(B, Tq, Hq, dtype=torch.float64)
    for b, h in itertools.product(range(B), range(Hq)):
        kh, vh = k[b, :, h // g].double(), v[b, :, h // g].double()
        s = q[b, :, h].double() @ kh.T * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        lse[b, :, h] = torch.logsumexp(s, dim=-1)
        out[b, :, h] = torch.softmax(s, dim=-1) @ vh
    return out, lse


@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
def test_attention_core_vs_float64(heads, softcap):
    Hq, Hkv = heads
    g = torch.Generator().manual_seed(12)
    q = torch.randn(2, 3, Hq, 64, generator=g)
    k = torch.randn(2, 37, Hkv, 64, generator=g)
    v = torch.randn(2, 37, Hkv, 64, generator=g)
    out, lse = attention_core(q, k, v, 0.3, softcap)
    ref_out, ref_lse = _naive_attention_f64(q, k, v, 0.3, softcap)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_reference_vs_sdpa(causal):
    g = torch.Generator().manual_seed(13)
    B, T, Tq, Hq, Hkv, D = 2, 40, 5, 8, 2, 64
    q = torch.randn(B, Tq, Hq, D, generator=g)
    k = torch.randn(B, T, Hkv, D, generator=g)
    v = torch.randn(B, T, Hkv, D, generator=g)
    out, _ = dense_attention_reference(q, k, v, D**-0.5, causal_offset=T - Tq if causal else None)
    ke = k.repeat_interleave(Hq // Hkv, dim=2)
    ve = v.repeat_interleave(Hq // Hkv, dim=2)
    mask = None
    if causal:
        mask = torch.arange(T)[None, :] <= (T - Tq + torch.arange(Tq))[:, None]
    sdpa = F.scaled_dot_product_attention(q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2), attn_mask=mask)
    torch.testing.assert_close(out, sdpa.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_dense_reference_causal_offset_per_row_and_fully_masked():
    g = torch.Generator().manual_seed(14)
    q = torch.randn(2, 3, 4, 16, generator=g)
    k = torch.randn(2, 6, 1, 16, generator=g)
    v = torch.randn(2, 6, 1, 16, generator=g)
    # Row 0: query t sees keys <= t - 1 (t=0 sees nothing); row 1 sees keys <= 2 + t.
    out, lse = dense_attention_reference(q, k, v, 0.25, causal_offset=torch.tensor([-1, 2]))
    assert torch.all(out[0, 0] == 0) and torch.all(torch.isneginf(lse[0, 0]))
    exp1, _ = dense_attention_reference(q[1:, 1:2], k[1:, :4], v[1:, :4], 0.25)
    torch.testing.assert_close(out[1:, 1:2], exp1)
    assert not torch.isnan(out).any()


def test_lse_is_natural_log_of_scaled_scores():
    q = torch.zeros(1, 1, 1, 4)
    k = torch.zeros(1, 5, 1, 4)
    v = torch.randn(1, 5, 1, 4)
    _, lse = dense_attention_reference(q, k, v, 1.0)
    assert math.isclose(float(lse), math.log(5), rel_tol=1e-6)


# --- validation --------------------------------------------------------------


def _valid_inputs():
    case = make_case(B=2, Tq=1, Hq=4, Hkv=2, D=16, P=8, pages=[2, 1], seed=15)
    return dict(q=case.q, k_pages=case.k_pages, v_pages=case.v_pages, block_table=case.block_table,
                num_blocks=case.num_blocks, slot_lens=case.slot_lens, scale=case.scale)


BAD = {
    "q_3d": (lambda a: a.update(q=a["q"][0]), "q must be"),
    "k_3d": (lambda a: a.update(k_pages=a["k_pages"][0]), "k_pages must be"),
    "v_shape": (lambda a: a.update(v_pages=a["v_pages"][:, :4]), "v_pages shape"),
    "head_dim": (lambda a: a.update(q=torch.randn(2, 1, 4, 32)), "head dim"),
    "gqa": (lambda a: a.update(q=torch.randn(2, 1, 3, 16)), "multiple of Hkv"),
    "q_dtype_int": (lambda a: a.update(q=a["q"].to(torch.int32)), "q dtype"),
    "kv_dtype": (lambda a: a.update(k_pages=a["k_pages"].half(), v_pages=a["v_pages"].half()), "must equal q dtype"),
    "bt_dtype": (lambda a: a.update(block_table=a["block_table"].long()), "block_table must be int32"),
    "nb_dtype": (lambda a: a.update(num_blocks=a["num_blocks"].long()), "num_blocks must be int32"),
    "sl_dtype": (lambda a: a.update(slot_lens=a["slot_lens"].long()), "slot_lens must be int32"),
    "bt_rows": (lambda a: a.update(block_table=a["block_table"][:1]), "block_table must be"),
    "nb_shape": (lambda a: a.update(num_blocks=a["num_blocks"][:1]), "num_blocks must be"),
    "sl_shape": (lambda a: a.update(slot_lens=a["slot_lens"][:-1]), "slot_lens must be"),
    "nb_range": (lambda a: a.update(num_blocks=torch.tensor([9, 1], dtype=torch.int32)), "num_blocks values"),
    "nb_negative": (lambda a: a.update(num_blocks=torch.tensor([-1, 1], dtype=torch.int32)), "num_blocks values"),
    "slot_out_of_range": (lambda a: a["block_table"].__setitem__((0, 0), 999), "slot ids"),
    "slot_len_range": (lambda a: a["slot_lens"].__setitem__(0, 9), "slot_lens values"),
    "q_last_stride": (lambda a: a.update(q=a["q"].transpose(2, 3).contiguous().transpose(2, 3)), "unit stride"),
    "k_last_stride": (lambda a: a.update(k_pages=a["k_pages"].transpose(2, 3).contiguous().transpose(2, 3)),
                      "unit stride"),
    "scale_nan": (lambda a: a.update(scale=float("nan")), "scale"),
    "softcap_neg": (lambda a: a.update(softcap=-1.0), "softcap"),
    "impl": (lambda a: a.update(impl="cuda"), "impl must be"),
    "not_tensor": (lambda a: a.update(block_table=[[0, 1]]), "must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_validation_errors_are_clear(name):
    args = _valid_inputs()
    attend_selected(**args, impl="torch")  # the unmodified inputs are fine
    mutate, message = BAD[name]
    mutate(args)
    impl = args.pop("impl", "torch")
    with pytest.raises(ValueError, match=message):
        attend_selected(**args, impl=impl)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no fp8 dtype")
def test_fp8_rejected():
    args = _valid_inputs()
    for key in ("q", "k_pages", "v_pages"):
        args[key] = args[key].to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="q dtype"):
        attend_selected(**args)


def test_tolerance_table_covers_dtypes():
    assert set(TOL) == set(DTYPES)


def test_import_kernels_does_not_import_triton_or_flash():
    code = "import sys, agentctx.kernels; assert 'triton' not in sys.modules and 'flash_attn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).parents[2]))
