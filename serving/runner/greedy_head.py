"""The exact greedy token of the output head from an int8 pass (CPU decode).

On a CPU the output head is the largest single cost of a decode step: Gemma 3 270M's is a
262,144 x 640 float32 matrix (670 MB), 37 of a ~90 ms step with 8 rows. A greedy request
needs only the argmax of the logits, and that can be found exactly without the float32
product:

1. the head in int8 (one scale per vocabulary row, made once, 168 MB) times the hidden row in
   two integer levels (one scale per row): approximate logits, from exact integer products by
   one of two backends (below);
2. a rigorous bound on each approximate logit's error, from the two quantisation errors:
   with ``w = s q + dw`` and ``h = a_s (a1 + a2 / 254) + dh``, the error of ``s a_s q.(a1 + a2 / 254)``
   is at most ``|dw|max * |h|_1 + |dh|max * |w|_1 + K |dw|max |dh|max``,
   plus a float32 rounding allowance;
3. every token whose upper bound reaches the best lower bound is a candidate (the argmax is
   always one); only their rows are multiplied in float32.

The result is a logits row that is exact (float32, softcap applied) at every candidate and
-inf elsewhere: its argmax is the argmax of the full logits, so a greedy pick over it is the
same token. Sampling, penalties and log-probabilities need the full row and never come here.
When the bound leaves too many candidates (over ``max_candidates`` in all rows), the rows get
the full product.
The reference is the full float32 product (tests/serving/test_greedy_head.py).

Backends for the integer product. ``int_mm``: ``torch._int_mm``, fast where the CPU has int8
dot-product instructions (VNNI: 17 ms for 8 rows of Gemma's head), but a slow fallback on an
AVX2-only CPU (seconds). ``fbgemm``: torch's quantized dynamic linear (FBGEMM, which has AVX2
kernels: ~10 ms for 1 row, ~35 ms for 16 on a 2-core Zen 2 box, against 57 and ~90-200 ms for
the float32 head). That op quantises its input itself, per tensor, to 7 bits (``reduce_range``:
AVX2's paired u8 x s8 sums stay inside int16); the levels are kept to integers in [-63, 63] and a
guard row holding -63 and 64 fixes that quantisation's scale at exactly 1, so its product is the
exact integer product too (checked against it in the tests). The runner times the backends on
real rows and keeps the fastest (serving/runner/output_head.py).
"""

from __future__ import annotations

import functools
import warnings

import torch

from agentctx.serving.compute_dtype import cpu_has_any

__all__ = ["GreedyHead", "BACKENDS", "fbgemm_available", "cpu_has_vnni"]

BACKENDS = ("int_mm", "fbgemm")
_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8", "i8mm", "asimddp"})
# Largest integer level per backend: int8's 127, or 63 where fbgemm reads activations in 7 bits.
_LEVEL = {"int_mm": 127, "fbgemm": 63}

# Float32 rounding of a K-term dot product, relative to sum |w_j h_j| <= |w|_1 |h|_max; generous
# (K * 2^-24 is ~4e-5 for K = 640), it only adds candidates.
_ROUNDING = 1e-4


class GreedyHead:
    """weight (V, K) float32 on CPU, bias (V,) or None; ``softcap`` the model's final logit cap."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, softcap: float | None = None,
                 max_candidates: int = 65536, backend: str = "int_mm"):
        if backend not in BACKENDS:
            raise ValueError(f"GreedyHead backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "fbgemm" and not fbgemm_available():
            raise ValueError("GreedyHead backend 'fbgemm' needs torch's quantized CPU ops (fbgemm/x86 engine)")
        if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"GreedyHead needs a (V, K) float32 CPU weight, got {weight.dtype} "
                             f"{tuple(weight.shape)} on {weight.device}")
        self.weight, self.bias, self.softcap = weight, bias, softcap
        self.max_candidates = max_candidates
        self.backend, self.level = backend, _LEVEL[backend]
        with torch.no_grad():
            v = weight.shape[0]
            self.scale, self.w_err, self.w_l1 = torch.empty(v), torch.empty(v), torch.empty(v)
            q8 = torch.empty(weight.shape, dtype=torch.int8)
            # In slices of rows: float32 temporaries the size of the head (670 MB for Gemma) cost
            # seconds of page faults on a VM; slices of 16K rows reuse a few tens of MB.
            for lo in range(0, v, 16384):
                rows = slice(lo, lo + 16384)
                w = weight[rows]
                sc = w.abs().amax(1).clamp_min(torch.finfo(torch.float32).tiny) / 127
                q = torch.round(w / sc[:, None]).clamp_(-127, 127)
                q8[rows], self.scale[rows], self.w_l1[rows] = q, sc, w.abs().sum(1)
                self.w_err[rows] = (w - q * sc[:, None]).abs().amax(1)  # |dw|max per row
            if backend == "int_mm":
                self.q_t = q8.t()  # (K, V) view: _int_mm reads it as is
            else:
                self._packed = _fbgemm_pack(q8, self.scale)

    @torch.inference_mode()
    def candidates(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, V) bool: the tokens that may be the argmax of ``hidden @ weight.T (+ bias)``."""
        h = hidden.float()
        b, k = h.shape
        h_max = h.abs().amax(1, keepdim=True)  # (B, 1)
        lv = self.level
        h_scale = h_max.clamp_min(torch.finfo(torch.float32).tiny) / lv
        # The hidden row in two integer levels, h ~ h_scale * (a1 + a2 / (2 lv)): a decode step's
        # hidden state has a few large dimensions (Gemma: max ~56 against a mean of ~2.7), so one
        # level leaves an error whose bound admits thousands of candidates; two leave a handful.
        x = h / h_scale
        a1 = torch.round(x).clamp_(-lv, lv)
        a2 = torch.round((x - a1) * (2 * lv)).clamp_(-lv, lv)
        h_err = (h - (a1 + a2 / (2 * lv)) * h_scale).abs().amax(1, keepdim=True)  # (B, 1) |dh|max
        # One integer product for both levels, times the head's row scales.
        acc = self._scaled_products(torch.cat([a1, a2]))  # (2B, V)
        approx = acc[b:].div_(2 * lv).add_(acc[:b]).mul_(h_scale)
        if self.bias is not None:
            approx += self.bias
        h_l1 = h.abs().sum(1, keepdim=True)
        bound = (h_l1 + k * h_err) * self.w_err + (h_err + _ROUNDING * h_max) * self.w_l1  # (B, V)
        best_low = (approx - bound).amax(1, keepdim=True)
        return approx.add_(bound) >= best_low

    def _scaled_products(self, levels: torch.Tensor) -> torch.Tensor:
        """(N, V) float32 ``(levels @ q.T) * scale`` for integer-valued float rows ``levels``.

        The integer sums are exact (|sum| <= K * 127^2 < 2^24, exact in int32 and in float32); the
        one multiply by the row scale rounds, inside the bound's allowance."""
        if self.backend == "int_mm":
            return torch._int_mm(levels.to(torch.int8), self.q_t).float().mul_(self.scale)
        guard = torch.zeros(1, levels.shape[1])
        guard[0, 0], guard[0, -1] = -self.level, self.level + 1  # fixes the op's input scale at 1
        out = torch.ops.quantized.linear_dynamic(torch.cat([levels, guard]), self._packed, True)
        return out[:-1]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, V) float32: the exact logits (softcapped) at every candidate, -inf elsewhere."""
        cand = self.candidates(hidden)
        h = hidden.float()
        rows, cols = cand.nonzero(as_tuple=True)
        if rows.numel() > self.max_candidates:  # the bound is loose here: the full product
            vals = h @ self.weight.t()
            if self.bias is not None:
                vals += self.bias
            return self.softcap * torch.tanh(vals / self.softcap) if self.softcap else vals
        # One product over the union of every row's candidates (one multithreaded matmul),
        # then each row keeps its own.
        union, where = torch.unique(cols, return_inverse=True)
        vals = (self.weight.index_select(0, union) @ h.t())[where, rows]
        if self.bias is not None:
            vals += self.bias[cols]
        if self.softcap:
            vals = self.softcap * torch.tanh(vals / self.softcap)
        out = torch.full(cand.shape, float("-inf"))
        out[rows, cols] = vals
        return out


def _fbgemm_pack(q: torch.Tensor, scale: torch.Tensor):
    """The int8 head (V, K) with its row scales, packed for torch's quantized dynamic linear."""
    with warnings.catch_warnings():  # torch marks quantized tensor creation deprecated; the op is what we use
        warnings.simplefilter("ignore")
        wq = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros(q.shape[0], dtype=torch.long), 0)
        return torch.ops.quantized.linear_prepack(wq, None)


@functools.lru_cache(maxsize=1)
def fbgemm_available() -> bool:
    """Whether torch's quantized dynamic linear runs here (an x86/fbgemm quantized engine)."""
    try:
        if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
            return False
        q = torch.ones(2, 4, dtype=torch.int8)
        packed = _fbgemm_pack(q, torch.ones(2))
        out = torch.ops.quantized.linear_dynamic(torch.ones(1, 4), packed, True)
        return bool(out.shape == (1, 2))
    except (RuntimeError, AttributeError):
        return False


@functools.lru_cache(maxsize=1)
def cpu_has_vnni(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has int8 dot-product instructions (x86 VNNI or AMX; Arm i8mm/dotprod),
    which ``torch._int_mm`` needs to be fast on CPU."""
    return cpu_has_any(_VNNI_FLAGS, cpuinfo)
