"""LocalEngine: our paged runner behind one engine loop. What a replica calls.

A call turns a :class:`GenerateRequest` into a :class:`Request` (its prompt tokens, plan, stop
ids, sampling, constraint; the context pinned on the device) and submits it to the replica's
:class:`EngineLoop`; the caller then reads tokens from the request's stream and does what is
per-request text work off the loop's thread: detokenizing, stop strings, the result. So a
request's path is: this file -> serving/engine/loop.py -> step.py (scheduler.py, then one forward in
serving/runner/batch_forward.py, then sampler.py) -> back through request.py's stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator

import torch

from agentctx.kernels.tail_merge import first_call_results
from agentctx.serving.compute_dtype import default_dtype
from agentctx.serving.engine.base import Engine, PageLoader, PrefillSink
from agentctx.serving.engine.copy_constraint import QuoteVocabulary
from agentctx.serving.engine.detokenize import TextStream
from agentctx.serving.engine.kv_cache import DeviceKVCache
from agentctx.serving.engine.loop import GRAPH_DECODE_STEPS, EngineLoop
from agentctx.serving.engine.request import GenerationCancelled, Request, RequestKind
from agentctx.serving.engine.scheduler import Scheduler
from agentctx.serving.model_loader import LoadedModel, load_model
from agentctx.serving.runner.batch_forward import run_greedy_steps, run_step
from agentctx.serving.runner.layer_breaks import layer_breaks
from agentctx.serving.runner.model_runner import ModelRunner
from agentctx.serving.runner.paged_kv import DocKV
from agentctx.serving.tokenize import tokenize_document
from agentctx.serving.types import (
    GenerateRequest,
    GenerateResult,
    PrefillResult,
    PrefillState,
    ScoreRequest,
    TokenizedDoc,
)

__all__ = ["LocalEngine", "STEP_TOKENS"]


log = logging.getLogger(__name__)

# Prompt tokens per step (without, with decode rows running), by device; beside decode rows the
# scheduler also keeps a step within 1.5x a decode-only step by measured costs
# (serving/engine/scheduler.py). CPU: small, since a prompt token costs ~3 ms against ~50 ms for
# a decode step of the 270M model on 2 cores, and 64 bounds how long a new request waits for the
# step in flight (~0.2 s; BENCHMARKS §4g). CUDA: one replay of the query graphs' largest bucket
# (256 tokens) per prompt and step, so a short question never waits behind several replays of a
# long prompt (a step that ran 2,048 prompt tokens was 8 replays).
STEP_TOKENS = {"cpu": (64, 32), "cuda": (256, 256)}


class LocalEngine(Engine):
    kind = "local"

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        *,
        page_size: int = 256,
        prefill_chunk_tokens: int = 1024,
        max_context_tokens: int = 1 << 20,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        device_cache_bytes: int = 8 << 30,
        page_loader: PageLoader | None = None,
        kernel_impl: str = "auto",
        query_mode: str = "auto",
        fused_norms: str = "auto",
        fused_rope: str = "auto",
        fused_proj: str = "auto",
        decode_batch: int = 16,
        step_tokens: int | None = None,
        step_tokens_decoding: int | None = None,
        max_step_kv_bytes: int | None = 4 << 30,
        tokenizer: str | None = None,
        kv_dtype: str = "auto",
    ):
        """decode_batch: requests running at once (rows per step); step_tokens /
        step_tokens_decoding: prompt tokens per step without / with decode rows running (None: by
        device, see STEP_TOKENS); max_step_kv_bytes: bound on the KV bytes the running requests
        read per step (serving/engine/scheduler.py); kv_dtype: documents' pages on the device,
        "auto" / "bf16" in the compute dtype, "fp8_e4m3" / "int8" quantised (serving/runner/quant_kv.py)."""
        if decode_batch < 1:
            raise ValueError(f"decode_batch must be >= 1, got {decode_batch}")
        if not isinstance(model, LoadedModel):
            if dtype is None:  # bf16 on a GPU and on a CPU with bf16 dot products (serving/compute_dtype.py)
                dtype = default_dtype(device)
            model = load_model(model, dtype=dtype, device=device, tokenizer=tokenizer)
        self.runner = ModelRunner(model, page_size=page_size, prefill_chunk_tokens=prefill_chunk_tokens,
                                  max_context_tokens=max_context_tokens, kernel_impl=kernel_impl,
                                  query_mode=query_mode, fused_norms=fused_norms, fused_rope=fused_rope,
                                  fused_proj=fused_proj, kv_dtype=kv_dtype)
        self.tokenizer = model.tokenizer
        self.model_id = model.model_id
        self.page_size = page_size
        self.page_loader = page_loader
        self.kv = DeviceKVCache(device_cache_bytes)
        dev = self.runner.device
        auto = STEP_TOKENS["cuda" if dev.type == "cuda" else "cpu"]
        self.scheduler = Scheduler(max_rows=decode_batch, step_tokens=step_tokens or auto[0],
                                   step_tokens_decoding=step_tokens_decoding or auto[1],
                                   max_step_kv_bytes=max_step_kv_bytes)
        self.loop = EngineLoop(lambda rows: run_step(self.runner, rows), self.scheduler, device=dev,
                               run_greedy=lambda rows, k: run_greedy_steps(self.runner, rows, k),
                               decode_steps=GRAPH_DECODE_STEPS if self.runner.query_mode == "graph" else 1)
        # Static decode rows (GPU path) per document and table width: one per running request.
        self.runner.batch_rows = min(decode_batch, 64)
        self._quotes: QuoteVocabulary | None = None
        self._stop_ids = frozenset(self.runner.stop_token_ids())
        self.stats = {"prefills": 0, "prefill_tokens": 0, "resumed_tokens": 0, "cache_hits": 0, "cache_misses": 0,
                      "loads": 0}

    @property
    def max_running(self) -> int:
        return self.scheduler.max_rows

    # ------------------------------------------------------------------ documents
    def tokenize_document(self, text: str) -> TokenizedDoc:
        return tokenize_document(self.tokenizer, text)

    def prefill(self, context_id: str, doc: TokenizedDoc, progress: bool = True,
                on_chunk: Callable[[int, int], None] | None = None, *, start: PrefillState | None = None,
                sink: PrefillSink | None = None) -> PrefillResult:
        """``on_chunk(done, total)`` once before the first chunk (``done`` is where it starts) and
        after each chunk (tokens), for callers that report progress. ``start``: resume from a saved
        state (tokens before it are not computed again); ``sink``: handed the state at chunk
        boundaries when it wants one (serving/serve/checkpoint.py)."""
        t0 = time.perf_counter()
        # One loop job per chunk: running requests keep stepping between chunks.
        chunks = self.runner.iter_prefill(doc.token_ids, progress=progress, start=start)
        kv = None
        n, step = len(doc.token_ids), self.runner.prefill_chunk_tokens
        done = first = 0 if start is None else start.num_tokens
        if on_chunk is not None:
            on_chunk(done, n)
        breaks = self.loop.between_layers if self.runner.layer_breaks else None

        def next_chunk():  # one job; the loop may step its requests between the chunk's layers
            with layer_breaks(breaks):
                return next(chunks, None)

        while (part := self.loop.call(next_chunk)) is not None:
            kv = part
            done = min(n, done + step)
            # Between chunks the loop does not touch this document: its state is read here, off the loop.
            if sink is not None and done < n and (from_page := sink.wants(done, n)) is not None:
                sink.take(self.runner.prefill_state(kv, done, from_page))
            if on_chunk is not None:
                on_chunk(done, n)
        dt = time.perf_counter() - t0
        kv.token_ids = list(doc.token_ids)
        self.stats["prefills"] += 1
        self.stats["prefill_tokens"] += n - first
        self.stats["resumed_tokens"] += first
        self._insert(context_id, kv)
        return PrefillResult(context_id, kv.num_tokens, kv.num_pages, self.page_size, kv.kv_bytes(), dt,
                             resumed_tokens=first)

    def export(self, context_id: str) -> tuple[int, list[torch.Tensor], torch.Tensor | None]:
        """(num_tokens, page tensors on CPU, window tensor on CPU) for the shared store (token ids: kv.token_ids)."""
        kv = self._lookup(context_id, tenant=None)
        # Quantised pages leave as the device holds them (QuantKVPage: values and scales).
        pages = [kv.page_tensor(i).cpu() for i in range(kv.num_pages)]
        window = kv.window_tensor()
        return kv.num_tokens, pages, None if window is None else window.cpu()

    @property
    def needs_window(self) -> bool:
        return bool(self.runner.layout.sliding_layers)

    @property
    def resumable(self) -> bool:
        # Float and quantised pages alike: a saved state carries the pages as held (prefill.py).
        return True

    @property
    def pages_quantized(self) -> bool:
        return self.runner.kv_quant is not None

    # ------------------------------------------------------------------ held contexts
    def _cached(self, context_id: str) -> DocKV | None:
        return self.kv.get(context_id)

    def _insert(self, context_id: str, kv: DocKV) -> None:
        self.kv.put(context_id, kv)

    def _from_store(self, num_tokens, pages, window, token_ids) -> DocKV:
        kv = DocKV.from_tensors(self.runner.layout, self.page_size, num_tokens, pages, window,
                                device=self.runner.device, kv_dtype=self.runner.kv_quant, dtype=self.runner.dtype)
        kv.token_ids = token_ids
        return kv

    def holds(self, context_id: str) -> bool:
        return context_id in self.kv

    def drop(self, context_id: str) -> bool:
        return self.kv.drop(context_id)

    def cached_bytes(self) -> int:
        return self.kv.nbytes()

    def describe(self) -> dict:
        r, s, ls = self.runner, self.scheduler, self.loop.stats
        sched = {"max_rows": s.max_rows, "step_tokens": s.step_tokens, "step_tokens_decoding": s.step_tokens_decoding,
                 "decoding_chunk": s.decoding_tokens(), "max_step_kv_bytes": s.max_step_kv_bytes,
                 "decode_step_ms": None if s.decode_step_s is None else round(s.decode_step_s * 1000, 2),
                 "prompt_token_ms": None if s.prompt_token_s is None else round(s.prompt_token_s * 1000, 3),
                 **self.loop.counts(), **vars(s.stats), **vars(ls)}
        # The names /metrics exports (entrypoints/metrics.py): forwards and the rows they carried.
        batching = {"max_rows": s.max_rows, "forwards": ls.steps, "steps": s.stats.rows,
                    "largest": s.stats.max_rows_seen, "fallbacks": ls.fallbacks}
        return {"engine": self.kind, "device": str(r.device), "dtype": str(r.dtype).replace("torch.", ""),
                "query_mode": r.query_mode, "fused_norms": len(r.norms.fused) if r.norms else 0,
                "fused_rope": len(r.rope.fused) if r.rope else 0,
                "fused_proj": len(r.proj.fused) if r.proj else 0,
                "scheduler": sched, "decode_batching": batching, "slot_kernels": first_call_results(),
                "kv_dtype": r.kv_dtype, "kv_bytes_per_token": r.layout.kv_bytes_per_token(r.kv_storage_dtype),
                "cached_contexts": len(self.kv),
                "cached_bytes": self.cached_bytes(), "evictions": self.kv.evictions}

    def close(self) -> None:
        self.loop.shutdown()

    # ------------------------------------------------------------------ requests
    def _request(self, context_id: str, tenant: str, prompt_ids: list[int], pages, **kw) -> Request:
        """A request over a context, its context pinned until it ends."""
        kv = self._lookup(context_id, tenant)
        sel = None if pages is None else self.runner.selected_pages(kv, pages)
        slot = kv.slot_lens().tolist()
        attended = kv.num_tokens if sel is None else int(sum(slot[p] for p in sel))
        per_token = self.runner.layout.kv_bytes_per_token(self.runner.kv_storage_dtype)
        req = Request(kv, self.runner.new_tail(kv), prompt_ids, sel, attended_tokens=attended, **kw)
        req.kv_bytes = per_token * (attended + len(prompt_ids) + req.max_new_tokens)
        self.kv.pin(context_id)
        req.on_finish = lambda _r: self.kv.release(context_id)
        return req

    def submit(self, req: GenerateRequest, aloop=None) -> Request:
        """Start a generation; its tokens arrive on the returned request's stream (read with
        ``async for`` on ``aloop`` when given, else from a thread)."""
        self.check_request(req)
        prompt_ids = self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        gen = None
        if req.seed is not None:
            gen = torch.Generator(device=self.runner.device)
            gen.manual_seed(req.seed)
        r = self._request(req.context_id, req.tenant, prompt_ids, req.pages, max_new_tokens=req.max_new_tokens,
                          temperature=req.temperature, sampling=req.sampling, stop_ids=self._stop_ids,
                          min_tokens=req.min_tokens, ignore_eos=req.ignore_eos, generator=gen)
        if req.constraint == "copy":
            try:
                r.constraint = self._copy_constraint(r.doc, req.copy_pages or r.pages)
            except BaseException:
                self.kv.release(req.context_id)
                raise
        if aloop is not None:
            r.stream.bind(aloop)
        return self.loop.submit(r)

    def _copy_constraint(self, kv: DocKV, pages):
        if kv.token_ids is None:
            raise ValueError("this context has no token ids: copy-constrained decoding is unavailable")
        if pages is not None and any(not 0 <= p < kv.num_pages for p in pages):
            raise ValueError(f"copy_pages out of range for a document of {kv.num_pages} pages")
        if self._quotes is None:
            self._quotes = QuoteVocabulary(self.tokenizer)
        return self._quotes.constraint(kv.token_ids, list(range(kv.num_pages)) if pages is None else list(pages),
                                       self.page_size)

    def generate(self, req: GenerateRequest, on_text: Callable[[str], None] | None = None) -> GenerateResult:
        t0 = time.perf_counter()
        r = self.submit(req)
        text = TextStream(self.tokenizer, req.stop, on_text)
        try:
            for ev in r.stream:
                if ev.error is not None:
                    raise ev.error
                if ev.token_ids and text.add(ev.token_ids):
                    self.loop.abort(r, "stop")  # a stop string: the request ends here
        except BaseException:
            if not r.finished:
                self.loop.abort(r)
            raise
        return self._result(r, req, text, t0)

    def stream(self, req: GenerateRequest) -> Iterator[str]:
        """Yield text deltas; when the consumer stops early, the generation is cancelled."""
        r = self.submit(req)
        deltas: list[str] = []
        text = TextStream(self.tokenizer, req.stop, deltas.append)
        try:
            for ev in r.stream:
                if ev.error is not None:
                    if isinstance(ev.error, GenerationCancelled):
                        return
                    raise ev.error
                if ev.token_ids and text.add(ev.token_ids):
                    self.loop.abort(r, "stop")
                yield from deltas
                deltas.clear()
            text.flush()
            yield from deltas
        finally:
            if not r.finished:
                self.loop.abort(r)

    async def agenerate(self, req: GenerateRequest) -> GenerateResult:
        result = None
        async for kind, value in self.astream_events(req, deltas=False):
            if kind == "result":
                result = value
        return result

    async def astream_events(self, req: GenerateRequest, deltas: bool = True
                             ) -> AsyncIterator[tuple[str, object]]:
        """``("delta", text)`` items, then one ``("result", GenerateResult)``, read on the caller's
        event loop (no thread per request); the request is cancelled if the consumer goes away."""
        import asyncio

        t0 = time.perf_counter()
        # Building the request may fetch the context's pages from the store: not on the event loop.
        r = await asyncio.to_thread(self.submit, req, asyncio.get_running_loop())
        out: list[str] = []
        text = TextStream(self.tokenizer, req.stop, out.append if deltas else None)
        try:
            async for ev in r.stream:
                if ev.error is not None:
                    raise ev.error
                if ev.token_ids and text.add(ev.token_ids):
                    self.loop.abort(r, "stop")
                for d in out:
                    yield "delta", d
                out.clear()
            res = self._result(r, req, text, t0)
            for d in out:
                yield "delta", d
            yield "result", res
        finally:
            if not r.finished:
                self.loop.abort(r)

    def _result(self, r: Request, req: GenerateRequest, text: TextStream, t0: float) -> GenerateResult:
        text.flush()
        total = time.perf_counter() - t0
        n_pages = r.doc.num_pages if r.pages is None else len(r.pages)
        return GenerateResult(
            text=text.text, token_ids=list(text.ids), prompt_tokens=len(r.prompt_ids), pages_attended=n_pages,
            attended_tokens=r.attended_tokens, context_tokens=r.doc.num_tokens,
            ttft_s=total if r.first_token_at is None else r.first_token_at - t0, total_s=total,
            finish_reason="stop" if text.stopped else (r.finish_reason or "length"))

    def _score_request(self, req: ScoreRequest, aloop=None) -> Request:
        self.check_score_request(req)
        prompt_ids = self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        options = [self.tokenizer(o, add_special_tokens=False)["input_ids"] for o in req.options]
        for option, ids in zip(req.options, options):
            if not ids:
                raise ValueError(f"option {option!r} has no tokens")
        r = self._request(req.context_id, req.tenant, prompt_ids, req.pages, kind=RequestKind.SCORE,
                          options=options, per_token=req.per_token, max_new_tokens=max(map(len, options)))
        if aloop is not None:
            r.stream.bind(aloop)
        return self.loop.submit(r)

    @staticmethod
    def _scores_of(ev) -> list[float] | None:
        if ev.error is not None:
            raise ev.error
        return None if ev.scores is None else list(ev.scores)

    def score(self, req: ScoreRequest) -> list[float]:
        """Sum of token log-probs of each option after the prompt (options share the prompt's KV)."""
        for ev in self._score_request(req).stream:
            if (scores := self._scores_of(ev)) is not None:
                return scores
        raise RuntimeError("the engine loop ended a score request without scores")

    async def ascore(self, req: ScoreRequest) -> list[float]:
        import asyncio

        r = await asyncio.to_thread(self._score_request, req, asyncio.get_running_loop())
        async for ev in r.stream:
            if (scores := self._scores_of(ev)) is not None:
                return scores
        raise RuntimeError("the engine loop ended a score request without scores")
