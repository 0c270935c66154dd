"""The output head of ``ModelRunner``: logits from hidden rows, all of them, a few ids' or greedy rows.

On CPU the head is most of a decode step's memory traffic (262K x 640 fp32 = 670 MB for Gemma 3
270M), so it has its own shapes of the product: ``weight @ hidden.T`` for full rows
(:func:`_cpu_head`), a few rows of the matrix for a few ids (``logits_for``), and an int8 pass
that leaves only the argmax's candidates for greedy rows (``serving/runner/greedy_head.py``),
used where it pays on this CPU. All of it ends in the model's final logit softcap.

``OutputHead`` is a base of ``ModelRunner`` rather than an object of its own so that the
runner's settings (``cpu_head_left``, ``cpu_greedy_head``) and its lazily built ``_greedy_head``
stay attributes of the runner, where the engine, tests and benchmarks set them.
"""

from __future__ import annotations

import logging

import torch

from agentctx.serving.runner.greedy_head import GreedyHead

__all__ = ["OutputHead"]

log = logging.getLogger(__name__)


def _plain_fp32_cpu_linear(head, hidden: torch.Tensor) -> bool:
    return (type(head) is torch.nn.Linear and hidden.device.type == "cpu" and hidden.dim() == 2
            and hidden.dtype == torch.float32 and head.weight.dtype == torch.float32)


def _cpu_head(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """hidden @ weight.T computed as (weight @ hidden.T).T, with one row sent as two.

    The output head is a CPU decode step's largest read (262K x 640 fp32 = 670 MB for Gemma 3
    270M). On this CPU's MKL, hidden @ weight.T for a few rows runs far below memory speed
    (66 ms for 1 row, 141 ms for 4) while weight @ hidden.T streams the weight (30 ms for 2
    rows, 45 ms for 4); a single row takes the slow matrix-vector path either way, so it is
    sent twice. Same result up to fp32 rounding. bench/experiments/cpu_head.py measures both forms.
    """
    n = hidden.shape[0]
    rows = hidden if n > 1 else hidden.repeat(2, 1)
    out = torch.mm(weight, rows.t()).t()[:n]
    return out if bias is None else out + bias


class OutputHead:
    """Logits from hidden rows for a runner with ``model`` (its ``lm_head``) and ``config``.

    The subclass sets ``cpu_head_left`` (bool), ``cpu_greedy_head`` (bool | "auto") and
    ``_greedy_head`` (GreedyHead | None) before the first call (``ModelRunner.__init__`` does).
    """

    def logits_for(self, hidden_row: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """Logits of only the given token ids, (len(ids),) fp32, for one hidden row.

        Reads len(ids) rows of the output matrix instead of all of it: for the 270M model the
        matrix is 262K x 640 (670 MB in fp32), most of a CPU decode step's memory traffic, and
        copy-constrained steps allow a handful of tokens.
        """
        head = self.model.lm_head
        idx = torch.as_tensor(ids, dtype=torch.long, device=hidden_row.device)
        logits = (head.weight.index_select(0, idx) @ hidden_row).float()
        if getattr(head, "bias", None) is not None:
            logits = logits + head.bias.index_select(0, idx).float()
        return self._final_softcap(logits)

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (T, vocab) fp32 of hidden rows (T, hidden)."""
        head = self.model.lm_head
        if self.cpu_head_left and _plain_fp32_cpu_linear(head, hidden):
            return self._final_softcap(_cpu_head(hidden, head.weight, head.bias))
        return self._final_softcap(head(hidden).float())

    def greedy_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """(T, vocab) fp32 rows whose argmax is that of ``logits_from_hidden(hidden)``: on CPU
        float32 the exact logits of the few tokens an int8 pass cannot rule out, -inf elsewhere
        (serving/runner/greedy_head.py); elsewhere the full logits."""
        head = self.model.lm_head
        if not (self.cpu_greedy_head and _plain_fp32_cpu_linear(head, hidden)):
            return self.logits_from_hidden(hidden)
        if self._greedy_head is None:
            cap = getattr(self.config, "final_logit_softcapping", None)
            self._greedy_head = GreedyHead(head.weight.detach(), None if head.bias is None else head.bias.detach(),
                                           softcap=cap)
            if self.cpu_greedy_head == "auto" and not self._int8_head_pays(hidden):
                self.cpu_greedy_head, self._greedy_head = False, None
                return self.logits_from_hidden(hidden)
        return self._greedy_head.logits(hidden)

    def _int8_head_pays(self, hidden: torch.Tensor) -> bool:
        """Whether the int8 head beats the float32 one on this CPU, timed once on real rows.

        It depends on the CPU's int8 instructions: 17 against 37 ms for 8 rows where
        ``torch._int_mm`` has VNNI kernels (BENCHMARKS §4g), but 143 ms against 40 ms for one
        row on an AMD EPYC (Zen 2, AVX2 only) CI box, where the int8 product falls back to a
        slow path."""
        import time

        def best(fn) -> float:
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        int8 = best(lambda: self._greedy_head.logits(hidden))
        fp32 = best(lambda: self.logits_from_hidden(hidden))
        log.info("greedy head on CPU: int8 pass %.1f ms, float32 head %.1f ms for %d rows: %s", 1e3 * int8,
                 1e3 * fp32, hidden.shape[0], "int8" if int8 < fp32 else "float32")
        return int8 < fp32

    def _final_softcap(self, logits: torch.Tensor) -> torch.Tensor:
        cap = getattr(self.config, "final_logit_softcapping", None)
        return cap * torch.tanh(logits / cap) if cap else logits
