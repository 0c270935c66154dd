"""Cases for the quantised page kernel (kernels/triton_attend_quant.py): the CPU interpreter and the GPU test.

A case is a ``_cases.make_case`` pool quantised with ``quantize_pages`` (fp8 or int8, any scale
granularity for K and V), then spoiled where no kernel may look: stored values past each slot's
length become fp8 NaN bytes / random int8, their per-token scales NaN, and the page-level scales of
slots with no valid token NaN. The Triton path is held to the reference (dequantise, float32
attention). Importing this does not import triton.
"""

from __future__ import annotations

import torch

from ._cases import make_case

__all__ = ["quant_cases", "run_quant_case", "spoil_tails"]

_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_DEF = dict(k="default", v="default")


def quant_cases(small: bool = True) -> dict[str, dict]:
    c: dict[str, dict] = {}
    base = dict(q="fp32", Hq=8, Hkv=2, D=64, Tq=1, B=3, P=16, pages=[4, 0, 3], ragged="any")
    for kv in ("fp8", "int8"):
        # Every K x V granularity once per dtype, on small GQA shapes with ragged pages.
        for kg in ("page_head", "token_head", "channel"):
            for vg in ("page_head", "token_head", "channel"):
                c[f"{kv}-k_{kg}-v_{vg}"] = dict(base, kv=kv, k=kg, v=vg, seed=len(c))
        c[f"{kv}-default-bf16-gemma-splits5"] = dict(kv=kv, **_DEF, q="bf16", Hq=4, Hkv=1, D=128, Tq=1, B=2, P=32,
                                                     pages=[5, 3], softcap=30.0, num_splits=5, seed=40)
        c[f"{kv}-default-fp16-tq3-softcap"] = dict(kv=kv, **_DEF, q="fp16", Hq=8, Hkv=8, D=64, Tq=3, B=2, P=16,
                                                   pages=[3, 2], softcap=20.0, seed=41)
        c[f"{kv}-default-splits3-tq2"] = dict(base, kv=kv, **_DEF, Tq=2, num_splits=3, seed=42)
    c["fp8k-int8v-mixed"] = dict(base, kv="fp8", v_kv="int8", k="token_head", v="token_head", seed=50)
    c["page48-d80-channel"] = dict(kv="int8", k="channel", v="channel", q="fp32", Hq=4, Hkv=2, D=80, Tq=3, B=2,
                                   P=48, pages=[3, 2], seed=51)
    c["tq40-multi-mtile"] = dict(base, kv="fp8", **_DEF, Tq=40, B=2, pages=[2, 3], seed=52)
    c["pad-garbage"] = dict(base, kv="int8", **_DEF, B=2, pages=[2, 1], pad_value=2**31 - 1, seed=53)
    c["all-rows-empty"] = dict(base, kv="fp8", **_DEF, B=2, pages=[0, 0], seed=54)
    c["empty-slots-selected"] = dict(base, kv="int8", k="page_head", v="page_head", B=2, pages=[3, 2], zero_lens=True,
                                     seed=55)
    c["zero-head"] = dict(base, kv="int8", **_DEF, zero_head=1, ragged="last", seed=56)
    c["strided-scales"] = dict(base, kv="fp8", k="token_head", v="channel", strided=True, seed=57)
    if not small:
        for kv in ("fp8", "int8"):
            for kg, vg in (("default", "default"), ("page_head", "page_head"), ("token_head", "channel")):
                # Gemma 3 270M and Llama 3 8B heads, 256-token pages, decode and a few query tokens.
                c[f"gpu-gemma-{kv}-{kg}-{vg}"] = dict(kv=kv, k=kg, v=vg, q="bf16", Hq=4, Hkv=1, D=256, Tq=1, B=2,
                                                      P=256, pages=[64, 9], ragged="last", seed=60)
                c[f"gpu-gemma-{kv}-{kg}-{vg}-tq7"] = dict(kv=kv, k=kg, v=vg, q="bf16", Hq=4, Hkv=1, D=256, Tq=7,
                                                          B=2, P=256, pages=[33, 2], ragged="last", seed=61)
                c[f"gpu-llama-{kv}-{kg}-{vg}"] = dict(kv=kv, k=kg, v=vg, q="bf16", Hq=32, Hkv=8, D=128, Tq=1, B=4,
                                                      P=256, pages=[40, 3, 0, 17], ragged="last", seed=62)
            c[f"gpu-llama-{kv}-prompt300"] = dict(kv=kv, **_DEF, q="bf16", Hq=32, Hkv=8, D=128, Tq=300, B=1, P=256,
                                                  pages=[12], ragged="last", seed=63)
            c[f"gpu-llama-{kv}-fp16-softcap"] = dict(kv=kv, **_DEF, q="fp16", Hq=32, Hkv=8, D=128, Tq=1, B=2,
                                                     P=256, pages=[20, 7], softcap=50.0, seed=64)
    return c


def spoil_tails(pages, slot_lens: torch.Tensor, seed: int = 0) -> None:
    """In place: garbage wherever a kernel must not read (see the module docstring)."""
    data, scale = pages.data, pages.scale
    S, P = data.shape[:2]
    past = torch.arange(P)[None, :] >= slot_lens.cpu().long()[:, None]  # (S, P)
    gen = torch.Generator().manual_seed(seed)
    raw = data.view(torch.uint8) if data.dtype == torch.float8_e4m3fn else data.view(torch.int8)
    fill = torch.full_like(raw, 0x7F) if data.dtype == torch.float8_e4m3fn else \
        torch.randint(-128, 128, raw.shape, generator=gen, dtype=torch.int8)
    raw[past] = fill[past]
    if scale.shape[1] == P and P > 1:  # per-token scales
        scale[past] = float("nan")
    else:
        scale[slot_lens.cpu() == 0] = float("nan")


def run_quant_case(spec: dict, device: str = "cpu") -> None:
    """Build the case, run attend_selected_quant(impl='triton') and compare with impl='reference'."""
    from agentctx.kernels.attend_selected import attend_selected_quant
    from agentctx.kernels.kv_quant import QuantPages, quantize_pages
    from agentctx.kernels.triton_attend_quant import triton_attend_selected_quant
    from agentctx.kernels.triton_config import choose_config

    spec = dict(spec)
    qdt = _DT[spec.pop("q")]
    kv, v_kv = spec.pop("kv"), spec.pop("v_kv", None)
    kg, vg = spec.pop("k"), spec.pop("v")
    num_splits = spec.pop("num_splits", None)
    zero_lens, zero_head = spec.pop("zero_lens", False), spec.pop("zero_head", None)
    strided = spec.pop("strided", False)
    case = make_case(dtype=torch.float32, device="cpu", **spec)
    if zero_lens:  # every selected page of row 0 holds no valid token
        case.slot_lens[torch.tensor(case.rows[0])] = 0
    if zero_head is not None:  # an all-zero KV head: scale 0 everywhere
        case.k_pages[:, :, zero_head] = 0.0
        case.v_pages[:, :, zero_head] = 0.0
    lens = case.slot_lens
    k = quantize_pages(case.k_pages, kv, None if kg == "default" else kg, part="k", slot_lens=lens)
    v = quantize_pages(case.v_pages, v_kv or kv, None if vg == "default" else vg, part="v", slot_lens=lens)
    spoil_tails(k, lens, seed=1)
    spoil_tails(v, lens, seed=2)
    if strided:  # scales as every other head of a wider buffer
        def widen(p):
            wide = torch.full((*p.scale.shape[:2], 2 * p.scale.shape[2], p.scale.shape[3]), float("nan"))
            wide[:, :, ::2] = p.scale
            return QuantPages(p.data, wide[:, :, ::2])
        k, v = widen(k), widen(v)
        assert not k.scale.is_contiguous()
    q = case.q.to(qdt)
    rest = (case.block_table, case.num_blocks, lens)
    ref_out, ref_lse = attend_selected_quant(q, k, v, *rest, case.scale, case.softcap, impl="reference")
    dev = torch.device(device)
    to = [t.to(dev) for t in (q, *rest)]
    kd = QuantPages(k.data.to(dev), k.scale.to(dev))
    vd = QuantPages(v.data.to(dev), v.scale.to(dev))
    if num_splits is None:
        out, lse = attend_selected_quant(to[0], kd, vd, *to[1:], case.scale, case.softcap, impl="triton")
    else:
        B, Tq, Hq, D = q.shape
        cfg = choose_config(B, Tq, Hq, k.data.shape[2], D, k.data.shape[1], case.block_table.shape[1], dev,
                            num_splits=num_splits)
        out, lse = triton_attend_selected_quant(to[0], kd, vd, *to[1:], case.scale, case.softcap, config=cfg)
    check_close(out.cpu(), lse.cpu(), ref_out, ref_lse, qdt)


def check_close(out, lse, ref_out, ref_lse, dtype) -> None:
    """Same empty rows, no NaN, lse within 1e-3 (1e-4 fp32), out within 1e-2 relative norm (1e-5 fp32)
    and elementwise within the dtype's rounding of |ref| plus a small floor."""
    assert out.dtype == ref_out.dtype and out.shape == ref_out.shape
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "NaN in the result"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty), "empty-row pattern differs"
    fp32 = dtype == torch.float32
    torch.testing.assert_close(lse.masked_fill(empty, 0), ref_lse.masked_fill(empty, 0),
                               atol=1e-4 if fp32 else 1e-3, rtol=1e-4)
    o, r = out.float(), ref_out.float()
    rel = float((o - r).norm() / r.norm().clamp_min(1e-30))
    assert rel < (1e-5 if fp32 else 1e-2), f"relative error {rel:.2e}"
    torch.testing.assert_close(o, r, atol=1e-5 if fp32 else 1e-2, rtol=1e-5 if fp32 else 2e-2)
