"""The output head of ``ModelRunner``: logits from hidden rows, all of them, a few ids' or greedy rows.

On CPU the head is most of a decode step's memory traffic (262K x 640 fp32 = 670 MB for Gemma 3
270M), so it has its own shapes of the product: ``weight @ hidden.T`` for full rows
(:func:`_cpu_head`), a few rows of the matrix for a few ids (``logits_for``), and an int8 pass
that leaves only the argmax's candidates for greedy rows (``serving/runner/greedy_head.py``),
used where it pays on this CPU. All of it ends in the model's final logit softcap.

``OutputHead`` is a base of ``ModelRunner`` rather than an object of its own so that the
runner's settings (``cpu_head_left``, ``cpu_greedy_head``) and its lazily built ``_greedy_heads``
stay attributes of the runner, where the engine, tests and benchmarks set them.
"""

from __future__ import annotations

import functools
import logging

import torch

from agentctx.serving.runner.greedy_head import BACKENDS, GreedyHead, cpu_has_vnni, fbgemm_available

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

    The subclass sets ``cpu_head_left`` (bool), ``cpu_greedy_head`` (bool | "auto"), and the
    empty ``_greedy_heads`` (backend -> GreedyHead), ``_greedy_by_rows`` (row-count bucket ->
    "float32" or a backend) and ``_greedy_slow`` (backends not worth timing again) before the
    first call (``ModelRunner.__init__`` does).
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
        (serving/runner/greedy_head.py), where that is faster; elsewhere the full logits."""
        head = self.model.lm_head
        if not (self.cpu_greedy_head and _plain_fp32_cpu_linear(head, hidden)):
            return self.logits_from_hidden(hidden)
        bucket = 1 << max(0, hidden.shape[0] - 1).bit_length()  # 1, 2, 4, 8, ...
        choice = self._greedy_by_rows.get(bucket)
        if choice is None:
            choice = self._greedy_by_rows[bucket] = self._pick_greedy_head(head, hidden)
        if choice == "float32":
            return self.logits_from_hidden(hidden)
        return self._greedy_head_of(head, choice).logits(hidden)

    def _greedy_head_of(self, head, backend: str) -> GreedyHead:
        if backend not in self._greedy_heads:
            cap = getattr(self.config, "final_logit_softcapping", None)
            bias = None if head.bias is None else head.bias.detach()
            self._greedy_heads[backend] = GreedyHead(head.weight.detach(), bias, softcap=cap, backend=backend)
        return self._greedy_heads[backend]

    def _pick_greedy_head(self, head, hidden: torch.Tensor) -> str:
        """The head for steps of about this many rows: with ``cpu_greedy_head`` "auto", the fastest
        of the int8 backends and the float32 head, timed once on these rows ("float32" or a
        backend); with True, the first backend that runs here.

        It depends on the CPU's int8 instructions and on the rows: ``torch._int_mm`` takes 17
        against 37 ms for 8 rows where it has VNNI kernels (BENCHMARKS §4g), but 156 against 44 ms
        for one row on an AVX2-only AMD EPYC (Zen 2), where it falls back to a slow path. FBGEMM's
        AVX2 kernels run there: 12 against 33 ms for 1 row, 41 against 96 for 8, even at 16 and
        slower at 32, where two integer levels per row cost more than one float32 row. So
        ``_int_mm`` is tried only where the CPU has VNNI or FBGEMM is missing (building a head
        takes seconds: it is not built to lose)."""
        import time

        backends = [b for b in BACKENDS if b not in self._greedy_slow and (
            fbgemm_available() if b == "fbgemm" else cpu_has_vnni() or not fbgemm_available())]
        if self.cpu_greedy_head != "auto":
            return backends[0]

        def best(fn) -> float:  # the better of two runs: the first may fault pages in
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        timings = {"float32": best(lambda: self.logits_from_hidden(hidden))}
        for backend in backends:
            timings[backend] = best(functools.partial(self._greedy_head_of(head, backend).logits, hidden))
        choice = min(timings, key=timings.get)
        # A backend 3x slower than the best is on a slow path here (``_int_mm`` without VNNI takes
        # seconds for 8 rows): it is not timed again for other row counts.
        self._greedy_slow |= {b for b in backends if timings[b] > 3 * timings[choice]}
        # Keep only heads some row count uses (each is 168 MB for Gemma 3 270M).
        keep = set(self._greedy_by_rows.values()) | {choice}
        self._greedy_heads = {k: v for k, v in self._greedy_heads.items() if k in keep}
        log.info("greedy head on CPU for %d rows: %s -> %s", hidden.shape[0],
                 ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in timings.items()), choice)
        return choice

    def _final_softcap(self, logits: torch.Tensor) -> torch.Tensor:
        cap = getattr(self.config, "final_logit_softcapping", None)
        return cap * torch.tanh(logits / cap) if cap else logits
