"""Case grid shared by the Triton tests (GPU and CPU interpreter) and a checker.

Importing this module does not import triton: the CPU interpreter test only
needs the case ids here and runs the checks in a subprocess.
"""

from __future__ import annotations

import itertools

import torch

from ._cases import assert_close_attention, dense_expected, make_case

__all__ = ["interpreter_cases", "gpu_cases", "run_case"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _grid(small: bool) -> dict[str, dict]:
    cases: dict[str, dict] = {}
    heads, dims = [(4, 1), (8, 8), (32, 8)], [64, 128, 256]
    combos = list(itertools.product(_DT, heads, dims))
    if small:
        # 3x3 Latin square: every (dtype, heads), (dtype, D) and (heads, D) pair once, 9 cases not 27.
        combos = [(dt, heads[j], dims[(i + j) % 3]) for i, dt in enumerate(_DT) for j in range(3)]
    for i, (dt, (hq, hkv), d) in enumerate(combos):
        tq_list = [1 + 6 * (i % 2)] if small else [1, 7]
        cap_list = [20.0 if i % 4 == 0 else None] if small else [None, 20.0]  # small: i = 0, 4, 8
        for tq, cap in itertools.product(tq_list, cap_list):
            name = f"{dt}-hq{hq}-hkv{hkv}-d{d}-tq{tq}-cap{cap}"
            cases[name] = dict(dtype=dt, Hq=hq, Hkv=hkv, D=d, Tq=tq, softcap=cap, B=3, P=16,
                               pages=[3, 0, 5] if small else [7, 0, 13], seed=i)
    # Forced split counts: exercise the partial buffers and the merge kernel,
    # including splits that land entirely past a short row's pages.
    for ns in (2, 3, 7):
        cases[f"splits{ns}-ragged-any"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=2, B=3, P=16, pages=[6, 0, 2],
                                               ragged="any", seed=100 + ns, num_splits=ns)
    cases["splits5-bf16-softcap"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=1, B=2, P=32, pages=[5, 3],
                                         softcap=30.0, seed=110, num_splits=5)
    # > 64 splits: the merge kernel walks the split axis in several BLOCK_S steps.
    cases["splits67-merge-loop"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=1, B=2, P=16, pages=[66, 2],
                                        seed=118, num_splits=1000)
    # Narrow merge slices (16 of the head dim per program), as the GPU picks for decode with few heads;
    # the interpreter reports 4 SMs, so these cases pretend a large GPU.
    cases["merge-narrow-d256-splits5"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=1, B=2, P=32, pages=[5, 3],
                                              seed=120, num_splits=5, narrow_merge=True)
    cases["merge-narrow-d80-splits3"] = dict(dtype="fp32", Hq=4, Hkv=2, D=80, Tq=3, B=2, P=16, pages=[2, 3],
                                             seed=121, num_splits=3, narrow_merge=True)
    cases["merge-narrow-loop67"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=1, B=2, P=16, pages=[66, 2],
                                        seed=122, num_splits=1000, narrow_merge=True)
    cases["page48-nonpow2"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=1, B=2, P=48, pages=[3, 2], seed=111)
    cases["page256-multichunk"] = dict(dtype="fp16", Hq=8, Hkv=2, D=64, Tq=1, B=1, P=256, pages=[3], seed=112)
    cases["head-dim-80"] = dict(dtype="fp32", Hq=4, Hkv=2, D=80, Tq=3, B=2, P=16, pages=[2, 3], seed=113)
    cases["tq40-multi-mtile"] = dict(dtype="fp32", Hq=8, Hkv=2, D=64, Tq=40, B=2, P=16, pages=[2, 3], seed=114)
    cases["pad-garbage"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=1, B=2, P=16, pages=[2, 1], seed=115,
                                pad_value=2**31 - 1)
    cases["all-rows-empty"] = dict(dtype="fp32", Hq=4, Hkv=1, D=64, Tq=2, B=2, P=16, pages=[0, 0], seed=116)
    cases["empty-slots-selected"] = dict(dtype="bf16", Hq=4, Hkv=1, D=64, Tq=1, B=2, P=16, pages=[3, 2],
                                         ragged="any", seed=117, zero_lens=True)
    if not small:
        cases["large-pages"] = dict(dtype="bf16", Hq=32, Hkv=8, D=128, Tq=1, B=4, P=256, pages=[40, 3, 0, 17],
                                    seed=200)
        cases["large-gemma"] = dict(dtype="bf16", Hq=4, Hkv=1, D=256, Tq=7, B=2, P=256, pages=[64, 9], seed=201)
    return cases


def interpreter_cases() -> dict[str, dict]:
    """Small grid for Triton's CPU interpreter (slow per element)."""
    return _grid(small=True)


def gpu_cases() -> dict[str, dict]:
    return _grid(small=False)


def run_case(spec: dict, device: str = "cpu") -> None:
    """Build the case, run the Triton path and compare with the dense reference; raises on mismatch."""
    from agentctx.kernels import attend_selected
    from agentctx.kernels.triton_attend import triton_attend_selected
    from agentctx.kernels.triton_config import choose_config

    spec = dict(spec)
    dtype = _DT[spec.pop("dtype")]
    num_splits = spec.pop("num_splits", None)
    zero_lens = spec.pop("zero_lens", False)
    narrow_merge = spec.pop("narrow_merge", False)
    case = make_case(dtype=dtype, device="cpu", **spec)
    if zero_lens:  # every selected page of row 0 holds no valid token
        case.slot_lens[torch.tensor(case.rows[0])] = 0
        for s in case.rows[0]:
            case.k_pages[s] = float("nan")
            case.v_pages[s] = float("nan")
    ref_out, ref_lse = dense_expected(case)
    dev = torch.device(device)
    args = [t.to(dev) for t in case.args()[:-1]] + [case.scale]
    import agentctx.kernels.triton_attend as ta

    sm_count = ta._sm_count
    if narrow_merge:
        from agentctx.kernels.triton_config import _merge_block_d

        ta._sm_count = lambda device: 4096
        assert _merge_block_d(spec["B"] * spec["Tq"] * spec["Hq"], 256, 4096) == 16
    try:
        if num_splits is None:
            out, lse = attend_selected(*args, softcap=case.softcap, impl="triton")
        else:
            q, k = args[0], args[1]
            cfg = choose_config(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], k.shape[1],
                                args[3].shape[1], dev, num_splits=num_splits)
            out, lse = triton_attend_selected(*args, softcap=case.softcap, config=cfg)
    finally:
        ta._sm_count = sm_count
    assert_close_attention(out.cpu(), lse.cpu(), ref_out, ref_lse, dtype)
