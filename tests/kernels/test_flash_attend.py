"""flash-attn paged-KV path: clean NotImplementedError when unusable, exactness when usable."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from agentctx.kernels import attend_selected
from agentctx.kernels.flash_attend import flash_attend_selected, flash_available, flash_static_fit

from ._cases import assert_close_attention, make_case

_HAS_FLASH = importlib.util.find_spec("flash_attn") is not None


def test_unusable_flash_raises_not_implemented():
    case = make_case(B=1, pages=[2], P=16, seed=1)
    with pytest.raises(NotImplementedError, match="flash path unusable"):
        flash_attend_selected(*case.args())


def test_static_fit_reasons():
    case = make_case(B=1, pages=[1], P=16, seed=2)
    reason = flash_static_fit(case.q, case.k_pages)
    assert reason is not None
    if not flash_available():
        assert "not installed" in reason


needs_flash_gpu = pytest.mark.skipif(not (_HAS_FLASH and torch.cuda.is_available()),
                                     reason="needs flash_attn and a CUDA GPU")


@pytest.mark.gpu
@needs_flash_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("heads", [(4, 1), (32, 8)])
def test_flash_matches_reference(dtype, softcap, heads):
    Hq, Hkv = heads
    D = 256 if Hkv == 1 else 128
    case = make_case(B=3, Tq=1, Hq=Hq, Hkv=Hkv, D=D, P=256, dtype=dtype, pages=[3, 0, 5], ragged="last",
                     softcap=softcap, seed=3, device="cuda")
    got = attend_selected(*case.args(), softcap=softcap, impl="flash")
    ref = attend_selected(*case.args(), softcap=softcap, impl="torch")
    assert_close_attention(*got, *ref, dtype)


@pytest.mark.gpu
@needs_flash_gpu
def test_flash_rejects_ragged_inner_page_and_auto_falls_back():
    case = make_case(B=1, Tq=1, Hq=8, Hkv=2, D=128, P=256, dtype=torch.bfloat16, pages=[3], ragged="none",
                     seed=4, device="cuda")
    case.slot_lens[case.rows[0][0]] = 100  # first (inner) page ragged
    with pytest.raises(NotImplementedError, match="not full"):
        attend_selected(*case.args(), impl="flash")
    got = attend_selected(*case.args(), impl="auto")
    ref = attend_selected(*case.args(), impl="torch")
    assert_close_attention(*got, *ref, torch.bfloat16)
