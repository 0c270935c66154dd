"""The exact greedy token of the output head from an int8 pass (CPU decode).

On a CPU the output head is the largest single cost of a decode step: Gemma 3 270M's is a
262,144 x 640 float32 matrix (670 MB), 37 of a ~90 ms step with 8 rows. A greedy request
needs only the argmax of the logits, and that can be found exactly without the float32
product:

1. the head in int8 (one scale per vocabulary row, made once, 168 MB) times the hidden row in
   two int8 levels (one scale per row) through ``torch._int_mm``: approximate logits;
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
"""

from __future__ import annotations

import torch

__all__ = ["GreedyHead"]

# Float32 rounding of a K-term dot product, relative to sum |w_j h_j| <= |w|_1 |h|_max; generous
# (K * 2^-24 is ~4e-5 for K = 640), it only adds candidates.
_ROUNDING = 1e-4


class GreedyHead:
    """weight (V, K) float32 on CPU, bias (V,) or None; ``softcap`` the model's final logit cap."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, softcap: float | None = None,
                 max_candidates: int = 65536):
        if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"GreedyHead needs a (V, K) float32 CPU weight, got {weight.dtype} "
                             f"{tuple(weight.shape)} on {weight.device}")
        self.weight, self.bias, self.softcap = weight, bias, softcap
        self.max_candidates = max_candidates
        with torch.no_grad():
            self.scale = weight.abs().amax(1).clamp_min(torch.finfo(torch.float32).tiny) / 127  # (V,)
            q = torch.round(weight / self.scale[:, None]).clamp_(-127, 127)
            self.q_t = q.to(torch.int8).t()  # (K, V) view: _int_mm reads it as is
            self.w_err = (weight - q * self.scale[:, None]).abs().amax(1)  # (V,) |dw|max per row
            self.w_l1 = weight.abs().sum(1)  # (V,)

    @torch.inference_mode()
    def candidates(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, V) bool: the tokens that may be the argmax of ``hidden @ weight.T (+ bias)``."""
        h = hidden.float()
        b, k = h.shape
        h_max = h.abs().amax(1, keepdim=True)  # (B, 1)
        h_scale = h_max.clamp_min(torch.finfo(torch.float32).tiny) / 127
        # The hidden row in two int8 levels, h ~ h_scale * (a1 + a2 / 254): a decode step's hidden
        # state has a few large dimensions (Gemma: max ~56 against a mean of ~2.7), so one level
        # leaves an error whose bound admits thousands of candidates; two leave a handful.
        x = h / h_scale
        a1 = torch.round(x).clamp_(-127, 127)
        a2 = torch.round((x - a1) * 254).clamp_(-127, 127)
        h_err = (h - (a1 + a2 / 254) * h_scale).abs().amax(1, keepdim=True)  # (B, 1) |dh|max
        # One int8 product for both levels; exact in int32 (|sum| <= K * 127^2 < 2^24, so also
        # exact once converted to float32).
        acc = torch._int_mm(torch.cat([a1, a2]).to(torch.int8), self.q_t).float()  # (2B, V)
        approx = acc[b:].div_(254).add_(acc[:b]).mul_(h_scale).mul_(self.scale)
        if self.bias is not None:
            approx += self.bias
        h_l1 = h.abs().sum(1, keepdim=True)
        bound = (h_l1 + k * h_err) * self.w_err + (h_err + _ROUNDING * h_max) * self.w_l1  # (B, V)
        best_low = (approx - bound).amax(1, keepdim=True)
        return approx.add_(bound) >= best_low

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
