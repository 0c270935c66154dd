"""One step of the engine loop: schedule, one forward, sample, postprocess.

:class:`EngineStep` holds what a step needs (the scheduler, the forward ``run_step``, the greedy
window ``run_greedy``, the sampler's generator) and no thread; serving/engine/loop.py's
:class:`~agentctx.serving.engine.loop.EngineLoop` adds the thread and the callers' queues around
it. Each step::

    plan = scheduler.schedule()           # which rows: decode tokens, prompt chunks, options
    out = run_step(rows(plan))             # one packed forward (serving/runner/batch_forward.py)
    tokens = sample(out.last, params)      # every row's next token at once, on the device
    postprocess(plan, tokens.tolist())     # the step's one host sync; append, stop, finish

If a forward fails, each of its rows is run alone, so a bad request fails alone (its stream gets
the error) and the others go on.

Greedy decode windows (``decode_steps`` k > 1, the GPU default): when every row of a step is a
plain greedy decode row, k forwards run back to back with each argmax fed to the next forward on
the device (``run_greedy``, serving/runner/batch_forward.run_greedy_steps) and one sync reads the
k tokens (one event per request), so the loop's own Python between forwards is paid once per k.
A request that stops inside the window (an end token, its length) drops the rest of it. New
requests wait at most one window (a few ms) to be scheduled. k = 1: a sync after every forward.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentctx.serving.engine.request import Request, RequestKind, RequestStatus, StreamEvent
from agentctx.serving.engine.sampler import RowSampling, sample
from agentctx.serving.engine.scheduler import RowKind, ScheduledRow, Scheduler, StepPlan
from agentctx.serving.runner.batch_forward import Row, StepOutput, release

__all__ = ["EngineStep", "LoopStats", "GRAPH_DECODE_STEPS"]

log = logging.getLogger(__name__)
GRAPH_DECODE_STEPS = 4  # forwards per greedy decode window on the CUDA-graph path (docstring above)


@dataclass
class LoopStats:
    steps: int = 0  # forwards run
    fallbacks: int = 0  # steps that failed and were re-run row by row
    failed_rows: int = 0
    jobs: int = 0  # jobs run (prefill chunks)
    host_syncs: int = 0  # reads of device results by the host (one per step that samples)
    tokens: int = 0  # tokens sampled
    windows: int = 0  # greedy decode windows run (each decode_steps forwards, one sync)
    break_steps: int = 0  # steps run between two layers of a job (serving/runner/layer_breaks.py)
    step_s: float = 0.0  # time in steps (forward, sampling, postprocess)


class EngineStep:
    """``run_step(rows) -> StepOutput`` runs one forward (serving/runner/batch_forward.run_step bound
    to a runner); it must leave its rows' tails unchanged when it raises. ``run_greedy(rows, k)``:
    k greedy forwards fed on the device, tokens (n, k) or None (see the module docstring)."""

    def __init__(self, run_step: Callable[[list[Row]], StepOutput], scheduler: Scheduler, *,
                 device: torch.device | str = "cpu",
                 run_greedy: Callable[[list[Row], int], torch.Tensor | None] | None = None, decode_steps: int = 1):
        if decode_steps < 1:
            raise ValueError(f"decode_steps must be >= 1, got {decode_steps}")
        self._run = run_step
        self._run_greedy = run_greedy
        self.decode_steps = decode_steps
        self.scheduler = scheduler
        self.stats = LoopStats()
        self.device = torch.device(device)
        self._generator = torch.Generator(device=self.device)  # noise of unseeded sampled rows
        self._generator.seed()
        # Optional: called with each step's plan before it runs (tests record the order of work).
        self.on_step: Callable[[StepPlan], None] | None = None

    def step(self) -> bool:
        """Schedule, run one forward, sample, postprocess. False when there was nothing to run."""
        plan = self.scheduler.schedule()
        if not plan:
            return False
        if self.on_step is not None:
            self.on_step(plan)
        t0 = time.perf_counter()
        rows = [sr.row() for sr in plan.rows]
        if self._greedy_window(plan, rows):
            self.scheduler.observe(plan, (time.perf_counter() - t0) / self.decode_steps)
            self.stats.steps += self.decode_steps
            self.stats.step_s += time.perf_counter() - t0
            return True
        try:
            out = self._run(rows)
        except Exception as exc:  # noqa: BLE001 - re-run one by one below
            if len(rows) == 1:
                self._fail(plan.rows[0], exc)
            else:
                log.warning("a step of %d rows failed (%s: %s); re-running each alone", len(rows),
                            type(exc).__name__, exc)
                self.stats.fallbacks += 1
                for sr, row in zip(plan.rows, rows):
                    if sr.request.finished:
                        continue
                    try:
                        one = self._run([row])
                    except Exception as err:  # noqa: BLE001 - goes to that row's request
                        self._fail(sr, err)
                    else:
                        self._postprocess(StepPlan([sr]), one)
        else:
            synced = self._postprocess(plan, out)
            if not synced and self.device.type == "cuda":
                # A step that sampled nothing (prompt chunks only) has not waited for its GPU work.
                # Wait now: else the loop queues a long prompt's every chunk at once, and a short
                # question that arrives meanwhile waits behind all of them (186x its idle TTFT).
                torch.cuda.current_stream(self.device).synchronize()
                self.stats.host_syncs += 1
            self.scheduler.observe(plan, time.perf_counter() - t0)
        self.stats.steps += 1
        self.stats.step_s += time.perf_counter() - t0
        return True

    def _greedy_window(self, plan: StepPlan, rows: list[Row]) -> bool:
        """Run a greedy decode window for this plan if it applies; True when it ran."""
        k = self.decode_steps
        if k < 2 or self._run_greedy is None:
            return False
        if not all(sr.kind == RowKind.DECODE and sr.request.kind is RequestKind.GENERATE
                   and sr.request.plain_greedy for sr in plan.rows):
            return False
        try:
            tokens = self._run_greedy(rows, k)
        except Exception as exc:  # noqa: BLE001 - the ordinary step below runs these rows again
            log.warning("a greedy decode window failed (%s: %s); running single steps", type(exc).__name__, exc)
            return False
        if tokens is None:
            return False
        picked = tokens.tolist()  # the window's one host sync
        self.stats.host_syncs += 1
        self.stats.windows += 1
        for sr, toks in zip(plan.rows, picked):
            req = sr.request
            req.steps += k
            burst: list[int] = []  # the window's tokens reach the caller as one event
            for tok in toks:
                if req.finished:
                    break  # stopped inside the window: the rest is dropped
                self.stats.tokens += 1
                self._append(req, tok, burst)
            self._flush(req, burst)
        return True

    def _postprocess(self, plan: StepPlan, out: StepOutput) -> bool:
        """Sample, append, finish; True when the host waited for the device (read sampled tokens)."""
        picks: list[tuple[ScheduledRow, int]] = []  # rows that sample, and their row of out.last
        params: list[RowSampling] = []
        for i, sr in enumerate(plan.rows):
            req = sr.request
            req.steps += 1
            if sr.kind == RowKind.PROMPT:
                req.num_computed += len(sr.token_ids)
            if sr.samples:
                allowed = req.allowed_ids()
                if allowed is not None and not allowed:
                    self._end(req, reason="stop")  # nothing may follow: the quote cannot start or go on
                    continue
                picks.append((sr, out.index[i]))
                params.append(req.sampling_row(allowed))
        scored = self._scores(plan, out)
        if picks:
            which = [j for _, j in picks]
            if which == list(range(out.last.shape[0])):
                logits = out.last
            else:
                logits = out.last.index_select(0, torch.tensor(which).to(out.last.device, non_blocking=True))
            tokens = sample(logits, params, self._generator).tolist()  # the step's host sync
            self.stats.host_syncs += 1
            self.stats.tokens += len(tokens)
            for (sr, _), tok in zip(picks, tokens):
                self._append(sr.request, tok)
        for req in scored:
            self._end(req, reason="stop")
        for sr in plan.rows:  # a generation asked for no token at all
            req = sr.request
            if sr.last_chunk and req.kind is RequestKind.GENERATE and req.max_new_tokens == 0 and not req.finished:
                self._end(req, reason="length")
        return bool(picks or scored)

    @staticmethod
    def _scores(plan: StepPlan, out: StepOutput) -> list[Request]:
        """Score requests' rows into their state; the requests whose every option is scored."""
        done = []
        for i, sr in enumerate(plan.rows):
            req = sr.request
            if req.kind is not RequestKind.SCORE:
                continue
            if sr.last_chunk:
                req.take_prompt_logits(out.last[out.index[i]])
            elif sr.kind == RowKind.OPTION:
                req.take_option_logits(sr.option, out.all[i])
            else:
                continue
            if req.scores_ready() and req not in done:
                done.append(req)
        for req in done:
            req.finish_scores()
        return done

    def _append(self, req: Request, tok: int, burst: list[int] | None = None) -> None:
        """Take one sampled token: stop, or keep it and hand it to the caller (with ``burst``: gather
        it there, handed over by :meth:`_flush`, before any finish event)."""
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        stops = tok in req.stop_ids and not req.ignore_eos
        if stops or (req.constraint is not None and not req.constraint.advance(tok)):
            self._flush(req, burst)
            self._end(req, reason="stop")
            return
        req.output_ids.append(tok)
        if burst is None:
            req.stream.put(StreamEvent((tok,)))
        else:
            burst.append(tok)
        if len(req.output_ids) >= req.max_new_tokens:
            self._flush(req, burst)
            self._end(req, reason="length")  # the last token's forward is never run

    @staticmethod
    def _flush(req: Request, burst: list[int] | None) -> None:
        if burst:
            req.stream.put(StreamEvent(tuple(burst)))
            burst.clear()

    def _fail(self, sr: ScheduledRow, exc: BaseException) -> None:
        self.stats.failed_rows += 1
        if not sr.request.finished:
            self._end(sr.request, error=exc)

    def _end(self, req: Request, reason: str | None = None, error: BaseException | None = None) -> None:
        if req.finished:
            return
        req.status = RequestStatus.FINISHED
        req.finish_reason, req.error = reason, error
        self.scheduler.finish(req)
        try:
            release(req.tail)  # its batched decode row (GPU path), if it holds one
        finally:
            if req.on_finish is not None:
                try:
                    req.on_finish(req)
                except Exception:  # noqa: BLE001 - a hook must not stop the loop
                    log.exception("on_finish of request %d failed", req.id)
            scores = tuple(req.scores) if req.scores is not None and error is None else None
            req.stream.put(StreamEvent(finish_reason=reason, error=error, scores=scores))
