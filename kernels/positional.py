"""Attention over contiguous keys with a positional (causal / sliding-window) mask, returning LSE.

Used for the parts of a forward pass that are not page-selected: a prefill chunk
attending to itself, a query attending to its own private tail, sliding-window
layers. Returning the log-sum-exp lets the caller merge the result exactly with a
page-selected partial (``kernels.merge``).

Keys are processed in blocks so memory stays O(Tq x block) even when a prefill
chunk attends to a million earlier tokens. The unmasked and the square causal case
go through PyTorch's fused flash kernel (CUDA, or its CPU flash kernel), which also
returns the LSE. Sliding-window prefill (no LSE needed) goes band by band through
SDPA with a small mask: a block of W queries only ever sees 2W - 1 keys.
"""

from __future__ import annotations

import torch

__all__ = [
    "full_attention_lse",
    "masked_attention_lse",
    "masked_attention_with_mask",
    "sliding_window_attention",
    "window_attention",
]

_KEY_BLOCK = 4096


def _merge_into(acc_o, acc_lse, o, lse):
    """Exact LSE merge of two partials; either side may be all -inf."""
    new_lse = torch.logaddexp(acc_lse, lse)
    safe = torch.where(torch.isinf(new_lse), torch.zeros_like(new_lse), new_lse)
    w_a = torch.exp(acc_lse - safe).unsqueeze(-1)
    w_b = torch.exp(lse - safe).unsqueeze(-1)
    return acc_o * w_a + o * w_b, new_lse


def _block_attention(q32, k, v, scale, softcap, mask):
    """q32 (Tq, Hq, D) fp32; k/v (Tk, Hkv, D); mask (Tq, Tk) bool or None -> (out fp32, lse)."""
    tq, hq, d = q32.shape
    hkv = k.shape[1]
    group = hq // hkv
    k32 = k.float()
    v32 = v.float()
    # (Hkv, group, Tq, D) x (Hkv, D, Tk): GQA without materialising repeated keys.
    qg = q32.view(tq, hkv, group, d).permute(1, 2, 0, 3)
    scores = torch.matmul(qg, k32.permute(1, 2, 0).unsqueeze(1)) * scale  # (Hkv, group, Tq, Tk)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (Hkv, group, Tq)
    # Shift for exp: lse itself, or any finite number where a row sees nothing (its scores are
    # all -inf, so exp gives 0 either way). One op instead of isinf/zeros_like/where: decode
    # runs this per layer per token, and on CUDA every op is a launch.
    safe = lse.clamp_min(torch.finfo(lse.dtype).min)
    probs = torch.exp(scores - safe.unsqueeze(-1))
    out = torch.matmul(probs, v32.permute(1, 0, 2).unsqueeze(1))  # (Hkv, group, Tq, D)
    out = out.permute(2, 0, 1, 3).reshape(tq, hq, d)
    lse = lse.permute(2, 0, 1).reshape(tq, hq)
    return out, lse


def masked_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal (optionally sliding-window) attention of one sequence.

    q: (Tq, Hq, D); k, v: (Tk, Hkv, D); q_pos: (Tq,), k_pos: (Tk,) absolute positions.
    Key j is visible to query i iff k_pos[j] <= q_pos[i] and, with a window W,
    k_pos[j] > q_pos[i] - W (the same rule as transformers' sliding mask).
    Returns out (Tq, Hq, D) in q.dtype and lse (Tq, Hq) float32 (-inf where nothing is visible).
    Passing the same tensor as q_pos and k_pos (a chunk attending to itself) enables
    the fused causal kernel on CUDA.
    """
    if window is None and not softcap and q_pos is k_pos:
        res = _causal_lse(q, k, v, scale)
        if res is not None:
            return res
    tq, hq, d = q.shape
    q32 = q.float()

    def block(start: int, end: int):
        kp = k_pos[start:end]
        mask = kp.unsqueeze(0) <= q_pos.unsqueeze(1)
        if window is not None:
            mask &= kp.unsqueeze(0) > (q_pos.unsqueeze(1) - window)
        # No "mask.any()" skip: it would sync the host every layer on CUDA; a fully
        # masked block yields lse = -inf and merges as a no-op.
        return _block_attention(q32, k[start:end], v[start:end], scale, softcap, mask)

    if k.shape[0] <= _KEY_BLOCK:
        # One block (every decode step's window or tail): its result is the answer; merging
        # it into an empty accumulator would return it unchanged after ~12 more ops.
        out, lse = block(0, k.shape[0])
        return out.to(q.dtype), lse
    out = torch.zeros(tq, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.full((tq, hq), float("-inf"), dtype=torch.float32, device=q.device)
    for start in range(0, k.shape[0], _KEY_BLOCK):
        o, l = block(start, min(start + _KEY_BLOCK, k.shape[0]))
        out, lse = _merge_into(out, lse, o, l)
    return out.to(q.dtype), lse


def masked_attention_with_mask(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, softcap: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with an explicit visibility mask, in one block (for short key sets).

    q: (Tq, Hq, D); k, v: (Tk, Hkv, D); mask: (Tq, Tk) bool, True = visible.
    Returns out (Tq, Hq, D) in q.dtype and lse (Tq, Hq) float32 (-inf where nothing is visible).
    Static-shape callers (CUDA-graph queries) build the mask on the device from slot indices.
    """
    out, lse = _block_attention(q.float(), k, v, scale, softcap, mask)
    return out.to(q.dtype), lse


def _fold_gqa(q: torch.Tensor, hkv: int) -> torch.Tensor:
    """(Tq, Hkv*g, D) -> (1, Hkv, Tq*g, D): the g query heads sharing a KV head become query
    rows in (token, group) order, so GQA needs no repeated keys."""
    tq, hq, d = q.shape
    return q.view(tq, hkv, hq // hkv, d).permute(1, 0, 2, 3).reshape(1, hkv, -1, d)


def _unfold_gqa(x: torch.Tensor, tq: int) -> torch.Tensor:
    """Inverse of _fold_gqa for (1, Hkv, Tq*g, ...) results: -> (Tq, Hkv*g, ...)."""
    hkv, rest = x.shape[1], x.shape[3:]
    y = x[0].view(hkv, tq, -1, *rest).transpose(0, 1)
    return y.reshape(tq, -1, *rest)


def window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, softcap: float | None = None
) -> torch.Tensor:
    """Attention with a visibility mask through SDPA, without the LSE (sliding layers need none).

    q: (Tq, Hq, D); k, v: (Tk, Hkv, D); mask: (Tq, Tk) bool, every row with >= 1 visible key.
    Returns (Tq, Hq, D) in q.dtype. Softcapped models take the explicit fp32 path.
    """
    if softcap:
        return masked_attention_with_mask(q, k, v, mask, scale, softcap)[0]
    tq, hq, _ = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    # Mask rows repeat to match the folded (token, group) query rows.
    m = mask.repeat_interleave(g, dim=0) if g > 1 else mask
    out = torch.nn.functional.scaled_dot_product_attention(
        _fold_gqa(q, hkv), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0), attn_mask=m, scale=scale
    )
    return _unfold_gqa(out, tq)


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    k_start: int,
    scale: float,
    window: int,
    softcap: float | None = None,
    block: int | None = None,
) -> torch.Tensor:
    """Causal sliding-window attention of consecutive queries over consecutive keys (no LSE).

    q: (Tq, Hq, D) at positions q_start, q_start + 1, ...; k, v: (Tk, Hkv, D) at positions
    k_start, ... ending with the queries (k_start + Tk == q_start + Tq). Key j is visible to
    query i iff i - W < j <= i. Queries go in blocks of ``block`` (default W); a block reads
    only keys [block_start - W + 1, block_end), so the work is O(Tq x W), not O(Tq x Tk).
    Positions are host ints, so nothing here syncs a GPU.
    """
    tq = q.shape[0]
    if k_start + k.shape[0] != q_start + tq or k_start > q_start:
        raise ValueError(f"keys [{k_start}, {k_start + k.shape[0]}) must end with the queries "
                         f"[{q_start}, {q_start + tq}) and start no later")
    bq = block or window
    outs = []
    for s in range(0, tq, bq):
        e = min(tq, s + bq)
        lo = max(0, q_start + s - window + 1 - k_start)
        hi = q_start + e - k_start
        kp = torch.arange(k_start + lo, k_start + hi, device=q.device)
        qp = torch.arange(q_start + s, q_start + e, device=q.device)
        mask = (kp[None] <= qp[:, None]) & (kp[None] > qp[:, None] - window)
        outs.append(window_attention(q[s:e], k[lo:hi], v[lo:hi], mask, scale, softcap))
    return torch.cat(outs) if len(outs) > 1 else outs[0]


def _fused_dtype_ok(q) -> bool:
    # CUDA's flash kernel takes half types only; the CPU flash kernel also fp32.
    ok = (torch.float16, torch.bfloat16) if q.is_cuda else (torch.float32, torch.bfloat16)
    return q.dtype in ok and q.shape[-1] <= 256


def _flash_op(q, k, v, scale, causal):
    """torch's fused flash kernel (CUDA or CPU) on (1, H, T, D) inputs; (out, lse) or None if refused."""
    try:
        if q.is_cuda:
            res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
        elif q.device.type == "cpu":
            res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
        else:
            return None
    except RuntimeError:
        return None
    return res[0], res[1]


def _flash_lse(q, k, v, scale):
    """Unmasked flash attention with its LSE; None when the op refuses the inputs.

    GQA without repeating keys: with no mask, query order is irrelevant, so the
    g query heads sharing a KV head are folded into the query length:
    (Tq, Hkv*g, D) -> (1, Hkv, Tq*g, D) against keys (1, Hkv, Tk, D).
    """
    if not _fused_dtype_ok(q):
        return None
    tq = q.shape[0]
    res = _flash_op(_fold_gqa(q, k.shape[1]), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
                    scale, False)
    if res is None:
        return None
    out, lse = res
    return _unfold_gqa(out, tq), _unfold_gqa(lse, tq).float()


def _causal_lse(q, k, v, scale):
    """Square causal attention (queries == keys, same positions), fused; None if refused."""
    tq, hq, d = q.shape
    if not _fused_dtype_ok(q) or k.shape[0] != tq:
        return None
    g = hq // k.shape[1]
    kr = k.repeat_interleave(g, dim=1) if g > 1 else k  # only the chunk's own keys: small
    vr = v.repeat_interleave(g, dim=1) if g > 1 else v
    res = _flash_op(q.transpose(0, 1).unsqueeze(0), kr.transpose(0, 1).unsqueeze(0),
                    vr.transpose(0, 1).unsqueeze(0), scale, True)
    if res is None:
        return None
    return res[0][0].transpose(0, 1), res[1][0].transpose(0, 1).float()


def full_attention_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, softcap: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasked attention: every query sees every key (keys strictly precede queries).

    q: (Tq, Hq, D); k, v: (Tk, Hkv, D). Returns out (Tq, Hq, D) q.dtype, lse (Tq, Hq) fp32.
    """
    if k.shape[0] == 0:
        return torch.zeros_like(q), torch.full(q.shape[:2], float("-inf"), device=q.device)
    if not softcap:
        res = _flash_lse(q, k, v, scale)
        if res is not None:
            return res
    tq, hq, d = q.shape
    q32 = q.float()
    out = torch.zeros(tq, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.full((tq, hq), float("-inf"), dtype=torch.float32, device=q.device)
    for start in range(0, k.shape[0], _KEY_BLOCK):
        o, l = _block_attention(q32, k[start : start + _KEY_BLOCK], v[start : start + _KEY_BLOCK], scale, softcap, None)
        out, lse = _merge_into(out, lse, o, l)
    return out.to(q.dtype), lse

