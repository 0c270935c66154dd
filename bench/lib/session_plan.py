"""Fitting a session into its time budget: what to run at the next size, and what naive would have cost.

Before each size the planner predicts its cost from the sizes measured so far and the physics
floors (:func:`fit_time`); when it does not fit, naive is dropped first (its figures are then
estimated), then every budget but the headline one, then the size. A SIGALRM hard stop
(:class:`BudgetExceeded`) follows the budget by 30 s.
"""

from __future__ import annotations

import time

from . import physics
from .report import HEADLINE_BUDGET, T0, size_label

__all__ = ["BudgetExceeded", "Clock", "SessionPlanner", "fit_time"]


class BudgetExceeded(Exception):
    """The hard wall-clock limit (--budget-s + grace) was hit."""


class Clock:
    def __init__(self, budget_s: float, reserve_s: float = 15.0):
        self.budget_s = budget_s
        self.reserve_s = reserve_s

    def elapsed(self) -> float:
        return time.perf_counter() - T0

    def remaining(self) -> float:
        return self.budget_s - self.reserve_s - self.elapsed()


def fit_time(points: list[tuple[int, float]], shape: physics.ModelShape, rates, n: int, kind: str) -> float | None:
    """Predict a prefill-like time at n from measured (size, seconds) points.

    Model: t = a*N + b*attn_flops(N), a, b >= 0, fitted on the two largest
    points; with one point (or a negative fit) the measured time is scaled by
    the ratio of physics floors.
    """
    if not points:
        return None
    pts = sorted(points)[-2:]

    def attn(m: int) -> float:
        return shape.prefill_flops(m) - 2.0 * shape.matrix_params * m

    if len(pts) == 2:
        (n1, t1), (n2, t2) = pts
        a11, a12, a21, a22 = n1, attn(n1), n2, attn(n2)
        det = a11 * a22 - a12 * a21
        if abs(det) > 0:
            a = (t1 * a22 - a12 * t2) / det
            b = (a11 * t2 - a21 * t1) / det
            if a >= 0 and b >= 0:
                return a * n + b * attn(n)
    n0, t0 = pts[-1]
    f0 = rates.floor_s(shape.prefill_flops(n0), shape.prefill_bytes(n0))
    f1 = rates.floor_s(shape.prefill_flops(n), shape.prefill_bytes(n))
    return t0 * max(f1 / f0, n / n0)


class SessionPlanner:
    """The planner's measurements for one model, filled in as its sizes run."""

    def __init__(self, shape: physics.ModelShape, rates: physics.MachineRates, clock: Clock, args,
                 decode_tokens: int):
        self.shape, self.rates, self.clock, self.args = shape, rates, clock, args
        self.decode_tokens = decode_tokens
        self.prefill_pts: list[tuple[int, float]] = []  # (tokens, shared prefill s)
        self.naive_pts: list[tuple[int, float]] = []  # (tokens, naive TTFT s)
        self.naive_decode_tok_s: float | None = None
        self.naive_stop: str | None = None  # why naive no longer runs at larger sizes
        self.query_s: float | None = None  # last measured mean shared-query time

    def plan(self, n: int, budgets: list[float], naive_oom: int | None) -> tuple[bool, list[float], str | None]:
        """(run naive?, budgets to run, skip reason) under the remaining time budget."""
        rem = self.clock.remaining()
        pre = fit_time(self.prefill_pts, self.shape, self.rates, n, "prefill")
        if pre is None:
            pre = 3.0 * self.rates.floor_s(self.shape.prefill_flops(n), self.shape.prefill_bytes(n)) + 2.0
        pre *= 1.3
        kv_read_s = n * self.shape.kv_bytes_per_token / self.rates.copy_bandwidth_Bps
        q = (self.query_s or 1.0) * 1.3 + 1.2 * self.decode_tokens * kv_read_s
        nq = self.args.agents * self.args.questions

        def cost(nb: int) -> float:
            runs = nq * (1 + nb) + self.args.agents + 2 * (1 + nb)
            return pre + runs * q + 3.0

        naive_pred = self.naive_prediction(n)
        naive_ok = not self.args.no_naive and self.naive_stop is None and naive_oom is None
        if naive_ok and naive_pred is not None and naive_pred > self.args.naive_max_query_s:
            self.naive_stop = (f"predicted {naive_pred:.0f}s/query > {self.args.naive_max_query_s:.0f}s "
                               f"at {size_label(n)}")
            naive_ok = False
        naive_cost = (self.args.naive_size_budget_s + (naive_pred or 0.0)) if naive_ok else 0.0
        if self.args.no_plan:
            return naive_ok, budgets, None
        if cost(len(budgets)) + naive_cost <= rem:
            return naive_ok, budgets, None
        if cost(len(budgets)) <= rem:
            return False, budgets, None
        head = [b for b in budgets if abs(b - HEADLINE_BUDGET) < 1e-9] or budgets[:1]
        if cost(len(head)) <= rem:
            return False, head, None
        return False, [], f"skipped: predicted {cost(len(head)):.0f}s > {rem:.0f}s left of --budget-s"

    def naive_prediction(self, n: int) -> float | None:
        return fit_time(self.naive_pts, self.shape, self.rates, n, "naive")

    def naive_estimate(self, n: int, nq: int, why: str) -> dict | None:
        """Naive's figures at a size it did not run, from the fit (None before any naive run)."""
        ttft = self.naive_prediction(n)
        if ttft is None:
            return None
        dec = (self.decode_tokens - 1) / self.naive_decode_tok_s if self.naive_decode_tok_s else 0.0
        return {"estimated": True, "why": why, "ttft_mean_s": ttft, "ttft_p50_s": ttft,
                "decode_tok_s": self.naive_decode_tok_s, "session_s": nq * (ttft + dec),
                "queries_measured": 0, "queries_total": nq, "utilization": 1.0,
                "method": "t = a*N + b*attn_flops(N) fitted to the two largest measured sizes "
                          "(or measured time x ratio of physics floors)"}
