"""One model through the session benchmark, size by size: the shared prefill, dense reuse, agentctx at each
budget, the 100% selection check, naive re-prefill, and the capacity probe.

A :class:`ModelBench` builds its model and runner once (:mod:`.models`), then :meth:`ModelBench.run_size`
runs one document size: its workload (:mod:`.workloads`), the peers (:mod:`.peers`) on it, each
summarised with its physical floors (:mod:`.physics`, :mod:`.session_report`), within the time
budget the planner allows (:mod:`.session_plan`).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import Any

import torch

from . import physics
from .memory import free, peak_gib, probe_kv_capacity, reset_peak
from .models import build_model
from .peers import (
    ORACLE_LABEL,
    RETRIEVAL_LABEL,
    AttentionTimer,
    NaivePeer,
    RetrievalSelector,
    SharedPeer,
    is_oom,
    kernel_decode_attention,
    oracle_random_pages,
)
from .report import HEADLINE_BUDGET, fmt, log, size_label
from .session_plan import Clock, SessionPlanner
from .session_report import agreement, peer_line, summarize
from .workloads import Query, QueryRun, Workload, contract_workload, needle_hit, random_workload

__all__ = ["ModelBench"]


class ModelBench:
    def __init__(self, name: str, sizes: list[int], args, device: torch.device, rates, clock: Clock):
        self.name, self.sizes, self.args, self.device, self.rates, self.clock = name, sizes, args, device, rates, clock
        from agentctx.serving.runner.model_runner import ModelRunner

        t0 = time.perf_counter()
        self.loaded, self.info = build_model(name, device, args.seed, args.weights, args.tokenizer)
        self.model = self.loaded.model
        self.build_s = time.perf_counter() - t0
        self.real = not self.info["random"]
        self.runner = ModelRunner(self.loaded, page_size=args.page_size, prefill_chunk_tokens=args.prefill_chunk,
                                  max_context_tokens=max(max(sizes) * 2, 1 << 21), kernel_impl=args.kernel_impl,
                                  query_mode=args.query_mode, fused_proj=args.fused_proj,
                                  kv_dtype=getattr(args, "kv_dtype", "auto"))
        self.shape = physics.ModelShape.from_model(self.model, self.runner.layout)
        self.shared = SharedPeer(self.runner, device)
        self.naive = NaivePeer(self.model, device, args.naive_chunk)
        self.decode_tokens = args.decode_tokens or (24 if self.real else 16)
        self.stop_ids: set[int] = set()
        if self.real:
            tok = self.loaded.tokenizer
            self.stop_ids = set(self.runner.stop_token_ids())
            for s in ("\n", "\n\n"):
                t = tok(s, add_special_tokens=False)["input_ids"]
                if len(t) == 1:
                    self.stop_ids.add(t[0])
        sel = args.selection
        if sel == "auto":
            sel = "retrieval" if (self.real and self._retrieval_ok()) else "oracle"
        self.selection = sel
        self.planner = SessionPlanner(self.shape, rates, clock, args, self.decode_tokens)
        self._dense_runs: list[QueryRun] = []
        self.oom: dict[str, int | None] = {"naive": None, "dense": None, "agentctx": None}
        self.largest: dict[str, int | None] = {"naive": None, "dense": None, "agentctx": None}
        self.result: dict[str, Any] = {
            "model": name,
            **self.info,
            "build_s": self.build_s,
            "shape": self.shape.to_dict(),
            "page_size": args.page_size,
            "query_mode": self.runner.query_mode,
            "kv_dtype": getattr(args, "kv_dtype", "auto"),
            "fused_proj": self.runner.fused_proj,
            "prefill_chunk": args.prefill_chunk,
            "naive_chunk": args.naive_chunk,
            "decode_tokens": self.decode_tokens,
            "selection": RETRIEVAL_LABEL if self.selection == "retrieval" else ORACLE_LABEL,
            "sizes": {},
        }
        log(f"{name}: built in {self.build_s:.1f}s ({self.info['weights']}, {self.info['dtype']}, "
            f"{self.shape.total_params / 1e6:.0f}M params, KV {self.shape.kv_bytes_per_token} B/token, "
            f"selection: {self.selection})")

    @staticmethod
    def _retrieval_ok() -> bool:
        try:
            import faiss  # noqa: F401
            import sentence_transformers  # noqa: F401

            import agentctx.retrieval as retrieval  # noqa: F401
        except Exception:  # noqa: BLE001
            return False
        return True

    # ------------------------------------------------------------------ warmup
    def warmup(self) -> None:
        """Compile kernels / pick algorithms outside the timed runs (CUDA only)."""
        if self.device.type != "cuda":
            return
        t0 = time.perf_counter()
        n = min(2 * self.args.prefill_chunk, 8192)
        wl = random_workload(n, self.args, self.shape.vocab, seed=12345)
        doc, _ = self.shared.prefill(wl.doc_ids)
        q = wl.queries[0]
        self.shared.run_query(doc, q.ids, lambda: (None, n), 2, set())
        ends = [0, doc.num_pages - 1]
        self.shared.run_query(doc, q.ids, lambda: (ends, 2 * self.args.page_size), 2, set())
        # compiled now: time one short query to seed the planner's per-query estimate
        run, _ = self.shared.run_query(doc, q.ids, lambda: (None, n), 2, set())
        per_forward = run.total_s / (1 + run.decode_steps)
        self.planner.query_s = per_forward * (self.decode_tokens + 1)
        del doc
        if not self.args.no_naive:
            self.naive.run_query(wl.doc_ids[:1024], q.ids, 2, set())
        free(self.device)
        log(f"{self.name}: warmup {time.perf_counter() - t0:.1f}s (one forward ~{per_forward * 1e3:.1f} ms)")

    # ------------------------------------------------------------------ selection
    def _selector(self, wl: Workload, doc_pages: int, frac: float, retr, seed: int):
        rng = random.Random(seed)
        a = self.args

        def make(q: Query):
            def select():
                if frac >= 1.0:
                    return list(range(doc_pages)), wl.num_tokens
                if retr is not None:
                    return retr.select(q.text, frac)
                return oracle_random_pages(doc_pages, wl.num_tokens, wl.page_size, q.needle_pages, frac, rng,
                                             a.sink_pages, a.recent_tokens)
            return select

        return make

    def _session(self, doc, wl: Workload, make_select, queries: list[Query], warm: bool) -> list[QueryRun]:
        """Run queries in order; each agent keeps its latest tail alive (5 agents' state resident)."""
        if warm and self.device.type == "cuda":
            q = queries[0]
            self.shared.run_query(doc, q.ids, make_select(q), 2, self.stop_ids)
        tails: dict[int, object] = {}
        runs = []
        for q in queries:
            chosen: list = []
            inner = make_select(q)

            def select(inner=inner, chosen=chosen):
                pages, attended = inner()
                chosen.append(pages)
                return pages, attended

            run, tail = self.shared.run_query(doc, q.ids, select, self.decode_tokens, self.stop_ids)
            tails[q.agent] = tail
            self._finish(run, q)
            if q.needle_pages:
                pages = chosen[0]
                run.needle_pages_covered = pages is None or set(q.needle_pages) <= set(pages)
            runs.append(run)
        del tails
        return runs

    def _finish(self, run: QueryRun, q: Query) -> None:
        run.agent, run.turn = q.agent, q.turn
        if self.real and q.needle_value is not None:
            run.answer = self.loaded.tokenizer.decode(run.tokens)
            run.needle_hit = needle_hit(q.needle_value, run.answer)

    def _instrumented(self, doc, q: Query, select) -> dict:
        # Attention share of a forward, timed per kernel call: needs the eager path (a
        # replayed CUDA graph calls no Python), so these forwards carry eager overhead.
        mode, self.runner.query_mode = self.runner.query_mode, "eager"
        try:
            # Untimed first: the other queries ran as graphs, so the eager path's kernels may
            # still need their JIT compile (seen as ~1 s "attention" at some sizes otherwise).
            self.shared.run_query(doc, q.ids, select, self.decode_tokens, self.stop_ids)
            with AttentionTimer(self.device) as timer:
                run, _ = self.shared.run_query(doc, q.ids, select, self.decode_tokens, self.stop_ids, timer=timer)
        finally:
            self.runner.query_mode = mode
        return {"attn_ttft_s": run.attn_ttft_s, "attn_decode_s_per_token": run.attn_decode_s_per_token,
                "ttft_s": run.ttft_s, "decode_steps": run.decode_steps}

    # ------------------------------------------------------------------ one size
    def run_size(self, n: int, budgets: list[float]) -> dict:
        a, dev = self.args, self.device
        label = size_label(n)
        run_naive, budgets, skip = self.planner.plan(n, budgets, self.oom["naive"])
        if skip:
            log(f"{self.name} {label}: {skip}")
            return {"tokens": n, "skipped": skip}
        seed = a.seed * 1000 + int(math.log2(max(n, 2)))
        if self.real:
            wl = contract_workload(n, a, self.loaded.tokenizer, seed)
        else:
            wl = random_workload(n, a, self.shape.vocab, seed)
        requested = n
        n = wl.num_tokens
        queries = wl.queries
        nq = len(queries)
        q_len = statistics.mean(len(q.ids) for q in queries)
        res: dict[str, Any] = {"tokens": n, "label": label, "workload": wl.kind, "queries": nq,
                               "question_tokens_mean": q_len, "peers": {}, "notes": [], "incomplete": True}
        # registered before running, so a hard stop still leaves what was measured in the report
        self.result["sizes"][str(requested)] = res
        ref_floor = self.shape.floors(self.rates, n, int(q_len), n)
        res["floors_dense"] = ref_floor

        # ---------------- shared prefill (dense reuse and agentctx share it)
        free(dev)
        reset_peak(dev)
        doc = None
        try:
            doc, prefill_s = self.shared.prefill(wl.doc_ids)
        except Exception as exc:  # noqa: BLE001
            if not is_oom(exc):
                raise
            msg = f"OOM in shared prefill: {str(exc).splitlines()[0][:160]}"
            doc = None
        if doc is None:
            free(dev)
            log(f"{self.name} {label}: {msg}")
            for peer in ("dense", "agentctx"):
                self.oom[peer] = self.oom[peer] or n
                res["peers"][peer] = {"oom": msg}
        else:
            prefill_peak = peak_gib(dev)
            self.planner.prefill_pts.append((n, prefill_s))
            res["prefill_s"] = prefill_s
            res["prefill_tok_s"] = n / prefill_s
            res["prefill_peak_gib"] = prefill_peak
            res["kv_bytes_doc"] = doc.kv_bytes()
            log(f"{self.name} {label}: shared prefill {prefill_s:.2f}s ({n / prefill_s:,.0f} tok/s, "
                f"floor {ref_floor['prefill_tok_s']:,.0f} tok/s), peak {fmt(prefill_peak)} GiB")
            self._run_shared(doc, wl, res, budgets, prefill_s, prefill_peak)
            del doc
            free(dev)

        # ---------------- naive
        self._run_naive(wl, res, run_naive, q_len)
        res.pop("incomplete", None)
        return res

    def _run_shared(self, doc, wl: Workload, res: dict, budgets: list[float], prefill_s: float,
                    prefill_peak: float | None) -> None:
        a, dev, n = self.args, self.device, wl.num_tokens
        queries = wl.queries
        nq = len(queries)
        retr = None
        retr_build = 0.0
        if self.selection == "retrieval" and wl.doc_text is not None:
            retr = RetrievalSelector(wl.doc_text, wl.offsets, wl.page_size, a.sink_pages, a.recent_tokens)
            retr_build = retr.build_s
            res["retrieval_index_build_s"] = retr_build
            log(f"{self.name} {size_label(n)}: retrieval index built in {retr_build:.1f}s")
        try:
            # dense reuse
            reset_peak(dev)
            dense_sel = lambda q: (lambda: (None, n))  # noqa: E731
            dense = self._session(doc, wl, dense_sel, queries, warm=True)
            d = summarize(dense, n, nq, prefill_s)
            d["peak_gib"] = (max(x for x in (peak_gib(dev), prefill_peak) if x is not None)
                             if dev.type == "cuda" else None)
            d["floors"] = self.shape.floors(self.rates, n, int(res["question_tokens_mean"]), n)
            self._kv(d)
            d["kernel"] = kernel_decode_attention(self.runner, doc, None, a.kernel_reps)
            d["in_model"] = self._instrumented(doc, queries[0], dense_sel(queries[0]))
            d["agreement_vs_dense"] = {"identical": 1.0, "prefix": 1.0, "n": nq}
            d["runs"] = [r.to_dict() for r in dense]
            res["peers"]["dense"] = d
            self._dense_runs = dense
            self.largest["dense"] = n
            self.planner.query_s = d["query_mean_s"]
            log(peer_line(self.name, "dense", d))

            # agentctx at each budget
            agent_res: dict[str, Any] = {}
            res["peers"]["agentctx"] = agent_res
            for frac in budgets:
                reset_peak(dev)
                make = self._selector(wl, doc.num_pages, frac, retr, seed=a.seed + int(frac * 1000))
                runs = self._session(doc, wl, make, queries, warm=True)
                s = summarize(runs, n, nq, prefill_s, extra_setup_s=retr_build)
                s["budget"] = frac
                s["peak_gib"] = (max(x for x in (peak_gib(dev), prefill_peak) if x is not None)
                                 if dev.type == "cuda" else None)
                s["floors"] = self.shape.floors(self.rates, n, int(res["question_tokens_mean"]),
                                                int(s["attended_tokens_mean"]))
                self._kv(s)
                pages0, _ = make(queries[0])()
                s["kernel"] = kernel_decode_attention(self.runner, doc, pages0, a.kernel_reps)
                s["kernel"]["attended_tokens"] = sum(
                    doc.page_size if p != doc.num_pages - 1 else doc.last_page_len for p in pages0)
                s["in_model"] = self._instrumented(doc, queries[0], make(queries[0]))
                s["agreement_vs_dense"] = agreement(runs, dense)
                s["runs"] = [r.to_dict() for r in runs]
                agent_res[f"{frac:g}"] = s
                log(peer_line(self.name, f"agentctx {frac:.0%}", s))
            # 100 % selection must reproduce dense reuse exactly (same page table, same kernels)
            full_make = self._selector(wl, doc.num_pages, 1.0, None, 0)
            check_q = queries[: a.agents]
            full = self._session(doc, wl, full_make, check_q, warm=False)
            agree_full = agreement(full, dense[: len(check_q)])
            res["agentctx_100pct_check"] = {**agree_full, "exact": agree_full["identical"] == 1.0}
            log(f"{self.name} {size_label(n)}: agentctx at 100% selection vs dense: "
                f"{'IDENTICAL' if agree_full['identical'] == 1.0 else 'DIFFERENT'} greedy tokens "
                f"({agree_full['n']} queries)")
            if agent_res:
                self.largest["agentctx"] = n
        except Exception as exc:  # noqa: BLE001
            if not is_oom(exc):
                raise
            msg = f"OOM during queries: {str(exc).splitlines()[0][:160]}"
            log(f"{self.name} {size_label(n)}: {msg}")
            res["notes"].append(msg)
            for peer in ("dense", "agentctx"):
                if peer not in res["peers"] or not res["peers"][peer]:
                    res["peers"][peer] = {"oom": msg}
                    self.oom[peer] = self.oom[peer] or n
                elif peer == "agentctx" and f"{HEADLINE_BUDGET:g}" not in res["peers"][peer]:
                    # budgets measured before the OOM stay in the JSON under "partial"
                    res["peers"][peer] = {"oom": msg, "partial": res["peers"][peer]}
                    self.oom[peer] = self.oom[peer] or n

    def _run_naive(self, wl: Workload, res: dict, run_naive: bool, q_len: float) -> None:
        a, dev, n = self.args, self.device, wl.num_tokens
        nq = len(wl.queries)
        floors = self.shape.floors(self.rates, n, int(q_len), n)
        if not run_naive:
            why = ("--no-naive" if a.no_naive else
                   f"OOM at {size_label(self.oom['naive'])}" if self.oom["naive"] else
                   self.planner.naive_stop or "time budget")
            est = self.planner.naive_estimate(n, nq, why)
            if est is not None:
                est["floors"] = floors
            res["peers"]["naive"] = est or {"skipped": why}
            log(f"{self.name} {size_label(n)}: naive not run ({why})"
                + (f"; estimated TTFT {est['ttft_mean_s']:.2f}s" if est else ""))
            return
        free(dev)
        reset_peak(dev)
        runs: list[QueryRun] = []
        spent = 0.0
        oom_msg = None
        for i, q in enumerate(wl.queries):
            if i > 0:
                mean = spent / i
                if spent + mean > a.naive_size_budget_s or self.clock.remaining() < mean + 5:
                    break
            try:
                r = self.naive.run_query(wl.doc_ids, q.ids, self.decode_tokens, self.stop_ids)
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc):
                    raise
                oom_msg = f"OOM: {str(exc).splitlines()[0][:160]}"
                break
            self._finish(r, q)
            runs.append(r)
            spent += r.total_s
            if r.ttft_s > a.naive_max_query_s:
                self.planner.naive_stop = f"one query took {r.ttft_s:.0f}s at {size_label(n)}"
                break
        free(dev)
        if oom_msg is not None:
            self.oom["naive"] = n
            log(f"{self.name} {size_label(n)}: naive {oom_msg}")
            res["peers"]["naive"] = {"oom": oom_msg, "peak_gib": peak_gib(dev)}
            if runs:
                res["peers"]["naive"]["partial_runs"] = [r.to_dict() for r in runs]
            return
        s = summarize(runs, n, nq, None)
        s["peak_gib"] = peak_gib(dev)
        s["floors"] = floors
        self._kv(s)
        dense = self._dense_runs if "runs" in res["peers"].get("dense", {}) else None
        if dense:
            s["agreement_vs_dense"] = agreement(runs, dense[: len(runs)])
        s["runs"] = [r.to_dict() for r in runs]
        s["estimated"] = False
        res["peers"]["naive"] = s
        self.largest["naive"] = n
        self.planner.naive_pts.append((n, s["ttft_mean_s"]))
        self.planner.naive_decode_tok_s = s["decode_tok_s"] or self.planner.naive_decode_tok_s
        log(peer_line(self.name, "naive", s))

    def _kv(self, s: dict) -> None:
        """KV bytes per token (paged, global layers) and KV bytes one decode step reads."""
        sh = self.shape
        s["kv_bytes_per_token"] = sh.kv_bytes_per_token
        s["sliding_window_kv_bytes"] = sh.window_kv_bytes
        s["kv_read_bytes_per_decode_token"] = int(s["attended_tokens_mean"] * sh.kv_bytes_per_token
                                                  + sh.window_kv_bytes)

    # ------------------------------------------------------------------ capacity
    def probe_capacity(self) -> dict:
        """KV allocation at doubling sizes past the largest size reached, until OOM (CUDA only)."""
        done = max([s for s in self.largest.values() if s] or [self.sizes[0]])
        return probe_kv_capacity(self.name, self.runner, self.model, self.shape.kv_bytes_per_token,
                                 self.args.page_size, self.device, done * 2, probe=not self.args.no_probe)

    def close(self) -> None:
        self.result["largest_context"] = dict(self.largest)
        self.result["first_oom"] = dict(self.oom)
        self.result["naive_stop"] = self.planner.naive_stop
        del self.runner, self.shared, self.naive, self.model, self.loaded
        free(self.device)
