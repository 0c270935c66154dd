"""Engines: what a model replica runs. ``LocalEngine`` is our paged runner in-process.

An engine tokenizes documents, prefills them once into a ``DocKV``, keeps recently
used contexts in a device-side cache, and generates over a chosen set of pages.
Contexts it does not hold are fetched through a ``page_loader`` (the shared KV
store), so any replica can serve any context without prefilling again.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator

import torch

from agentctx.kernels.tail_merge import first_call_results
from agentctx.serving.batch_forward import Row, release, run_rows
from agentctx.serving.copy_constraint import CopyConstraint
from agentctx.serving.decode import TokenLoop
from agentctx.serving.model_loader import LoadedModel, load_model
from agentctx.serving.model_runner import ModelRunner
from agentctx.serving.paged_kv import DocKV
from agentctx.serving.scheduler import GenerationCancelled, Scheduler
from agentctx.serving.tokenize import tokenize_document
from agentctx.serving.types import (
    EmptyInputError,
    GenerateRequest,
    GenerateResult,
    PrefillResult,
    ScoreRequest,
    TokenizedDoc,
)

__all__ = ["Engine", "LocalEngine", "ContextNotLoadedError", "PageLoader", "GenerationCancelled"]

log = logging.getLogger(__name__)

# page_loader(context_id, tenant) -> (num_tokens, [page tensors], window tensor | None, token ids)
PageLoader = Callable[[str, str], tuple[int, list[torch.Tensor], torch.Tensor | None, list[int]]]


class ContextNotLoadedError(KeyError):
    """The engine holds no KV for this context and has no store to fetch it from."""


class Engine(ABC):
    """Interface every engine backend implements (our runner, vLLM prompt-level mode)."""

    kind: str = "engine"
    model_id: str
    page_size: int
    page_loader: PageLoader | None = None
    stats: dict

    @property
    def page_namespace(self) -> str:
        """What store pages of this engine are hashed under (differs when pages hold other data)."""
        return self.model_id

    @property
    def needs_window(self) -> bool:
        """Whether contexts carry a sliding-window KV blob besides their pages."""
        return False

    @abstractmethod
    def tokenize_document(self, text: str) -> TokenizedDoc: ...

    @abstractmethod
    def prefill(self, context_id: str, doc: TokenizedDoc) -> PrefillResult: ...

    @abstractmethod
    def generate(self, req: GenerateRequest, on_text: Callable[[str], None] | None = None) -> GenerateResult: ...

    @abstractmethod
    def score(self, req: ScoreRequest) -> list[float]: ...

    @abstractmethod
    def export(self, context_id: str) -> tuple[int, list[torch.Tensor], torch.Tensor | None]:
        """(num_tokens, page tensors on CPU, window tensor or None) to publish to the shared store."""

    # Engines keep the contexts they can serve in ``self._docs`` (an OrderedDict used as an
    # LRU) guarded by ``self._lock``; what a context's entry holds is the engine's own business.
    _docs: OrderedDict
    _lock: threading.RLock

    def holds(self, context_id: str) -> bool:
        with self._lock:
            return context_id in self._docs

    def _lookup(self, context_id: str, tenant: str | None):
        """The cache entry of a context; on a miss, built from the shared store via page_loader."""
        with self._lock:
            entry = self._docs.get(context_id)
            if entry is not None:
                self._docs.move_to_end(context_id)
                self.stats["cache_hits"] += 1
                return entry
            self.stats["cache_misses"] += 1
        if self.page_loader is None:
            raise ContextNotLoadedError(f"context {context_id!r} is not loaded on this replica")
        entry = self._from_store(*self.page_loader(context_id, tenant or "default"))
        self.stats["loads"] += 1
        self._insert(context_id, entry)
        return entry

    @abstractmethod
    def _from_store(self, num_tokens: int, pages: list[torch.Tensor], window: torch.Tensor | None,
                    token_ids: list[int]):
        """This engine's cache entry from what page_loader returns."""

    @abstractmethod
    def _insert(self, context_id: str, entry) -> None: ...

    def drop(self, context_id: str) -> bool:
        """Forget a context on this replica (the shared store keeps it)."""
        with self._lock:
            return self._docs.pop(context_id, None) is not None

    @abstractmethod
    def cached_bytes(self) -> int: ...

    @abstractmethod
    def describe(self) -> dict:
        """Device, dtype, KV bytes per token, cached contexts: what /v1/models and info() report."""

    @staticmethod
    def check_request(req: GenerateRequest) -> None:
        """What every engine refuses before touching a context."""
        if not req.prompt or not req.prompt.strip():
            raise EmptyInputError("prompt is empty")
        if req.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {req.max_new_tokens}")

    @staticmethod
    def check_score_request(req: ScoreRequest) -> None:
        if not req.options:
            raise ValueError("score needs at least one option")
        if not req.prompt:
            raise EmptyInputError("prompt is empty")

    def stream(self, req: GenerateRequest) -> Iterator[str]:
        """Yield text deltas; default runs generate in a thread and relays its callback."""
        import queue

        q: queue.Queue = queue.Queue()
        done = object()

        def run():
            try:
                self.generate(req, on_text=q.put)
            except Exception as exc:  # relayed to the consumer below
                q.put(exc)
            q.put(done)

        threading.Thread(target=run, daemon=True).start()
        while (item := q.get()) is not done:
            if isinstance(item, Exception):
                raise item
            yield item


class LocalEngine(Engine):
    """Our paged-KV runner with a byte-budgeted LRU cache of DocKVs on its device."""

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
        decode_gather_s: float = 0.003,
        step_tokens: int | None = None,
        step_tokens_decoding: int | None = None,
        max_step_kv_bytes: int | None = 4 << 30,
        tokenizer: str | None = None,
    ):
        """decode_batch: requests running at once (rows per step; 1 = one request at a time);
        step_tokens / step_tokens_decoding: prompt tokens per step without / with decode rows
        running (None: by device, see _STEP_TOKENS); max_step_kv_bytes: bound on the KV bytes the
        running requests read per step (serving/scheduler.py)."""
        if decode_batch < 1:
            raise ValueError(f"decode_batch must be >= 1, got {decode_batch}")
        if not isinstance(model, LoadedModel):
            if dtype is None:
                on_gpu = (device or "").startswith("cuda") or (device is None and torch.cuda.is_available())
                dtype = torch.bfloat16 if on_gpu else torch.float32
            model = load_model(model, dtype=dtype, device=device, tokenizer=tokenizer)
        self.runner = ModelRunner(
            model,
            page_size=page_size,
            prefill_chunk_tokens=prefill_chunk_tokens,
            max_context_tokens=max_context_tokens,
            kernel_impl=kernel_impl,
            query_mode=query_mode,
            fused_norms=fused_norms,
            fused_rope=fused_rope,
            fused_proj=fused_proj,
        )
        self.tokenizer = model.tokenizer
        self.model_id = model.model_id
        self.page_size = page_size
        self.page_loader = page_loader
        self.device_cache_bytes = device_cache_bytes
        self._docs: OrderedDict[str, DocKV] = OrderedDict()
        self._pins: dict[str, int] = {}
        self._lock = threading.RLock()
        # Every forward runs on the scheduler's thread: each step one packed forward over the
        # decode rows and prompt chunks of all running requests (serving/scheduler.py).
        auto = _STEP_TOKENS["cuda" if self.runner.device.type == "cuda" else "cpu"]
        step_tokens, step_tokens_decoding = step_tokens or auto[0], step_tokens_decoding or auto[1]
        self.scheduler = Scheduler(lambda rows: run_rows(self.runner, rows), max_rows=decode_batch,
                                   step_tokens=step_tokens, step_tokens_decoding=step_tokens_decoding,
                                   max_step_kv_bytes=max_step_kv_bytes, gather_s=decode_gather_s)
        # Static decode rows (GPU path) per document and table width: one per running request.
        self.runner.batch_rows = min(decode_batch, 64)
        self._end_ids: set[int] | None = None
        self._tok_strings: list[str] = []
        self.stats = {"prefills": 0, "prefill_tokens": 0, "cache_hits": 0, "cache_misses": 0, "loads": 0}

    # ------------------------------------------------------------------ documents
    def tokenize_document(self, text: str) -> TokenizedDoc:
        return tokenize_document(self.tokenizer, text)

    def prefill(self, context_id: str, doc: TokenizedDoc, progress: bool = True) -> PrefillResult:
        t0 = time.perf_counter()
        # One scheduler job per chunk: running requests keep stepping between chunks.
        chunks = self.runner.iter_prefill(doc.token_ids, progress=progress)
        kv = None
        while (part := self.scheduler.call(lambda: next(chunks, None))) is not None:
            kv = part
        dt = time.perf_counter() - t0
        kv.token_ids = list(doc.token_ids)
        self.stats["prefills"] += 1
        self.stats["prefill_tokens"] += len(doc.token_ids)
        self._insert(context_id, kv)
        return PrefillResult(context_id, kv.num_tokens, kv.num_pages, self.page_size, kv.kv_bytes(), dt)

    def export(self, context_id: str) -> tuple[int, list[torch.Tensor], torch.Tensor | None]:
        """(num_tokens, page tensors on CPU, window tensor on CPU) for the shared store (token ids: kv.token_ids)."""
        kv = self._lookup(context_id, tenant=None)
        pages = [kv.page_tensor(i).cpu() for i in range(kv.num_pages)]
        window = kv.window_tensor()
        return kv.num_tokens, pages, None if window is None else window.cpu()

    @property
    def needs_window(self) -> bool:
        return bool(self.runner.layout.sliding_layers)

    def describe(self) -> dict:
        r = self.runner
        sched = self.scheduler.describe()
        # The names /metrics exports (entrypoints/metrics.py): forwards and the rows they carried.
        batching = {"max_rows": sched["max_rows"], "forwards": sched["steps"], "steps": sched["rows"],
                    "largest": sched["max_rows_seen"], "fallbacks": sched["fallbacks"]}
        return {"engine": self.kind, "device": str(r.device), "dtype": str(r.dtype).replace("torch.", ""),
                "query_mode": r.query_mode, "fused_norms": len(r.norms.fused) if r.norms else 0,
                "fused_rope": len(r.rope.fused) if r.rope else 0,
                "fused_proj": len(r.proj.fused) if r.proj else 0,
                "scheduler": sched, "decode_batching": batching, "slot_kernels": first_call_results(),
                "kv_bytes_per_token": r.layout.kv_bytes_per_token(r.dtype), "cached_contexts": len(self._docs),
                "cached_bytes": self.cached_bytes()}

    def cached_bytes(self) -> int:
        with self._lock:
            return sum(d.device_bytes() for d in self._docs.values())

    def _insert(self, context_id: str, kv: DocKV) -> None:
        with self._lock:
            self._docs[context_id] = kv
            self._docs.move_to_end(context_id)
            self._evict()

    def _evict(self) -> None:
        # Unpinned contexts go first, least recently used first; pinned ones stay.
        total = sum(d.device_bytes() for d in self._docs.values())
        for cid in list(self._docs):
            if total <= self.device_cache_bytes:
                break
            if self._pins.get(cid, 0) == 0 and len(self._docs) > 1:
                total -= self._docs.pop(cid).device_bytes()

    def _from_store(self, num_tokens, pages, window, token_ids) -> DocKV:
        kv = DocKV.from_tensors(
            self.runner.layout, self.page_size, num_tokens, pages, window, device=self.runner.device
        )
        kv.token_ids = token_ids
        return kv

    # ------------------------------------------------------------------ generation
    def generate(self, req: GenerateRequest, on_text: Callable[[str], None] | None = None,
                 cancel: threading.Event | None = None) -> GenerateResult:
        """Generate through the scheduler. Setting ``cancel`` drops the request's pending work and
        raises GenerationCancelled in this call (a stream whose consumer went away)."""
        self.check_request(req)
        t0 = time.perf_counter()
        kv = self._lookup(req.context_id, req.tenant)
        with self._lock:
            self._pins[req.context_id] = self._pins.get(req.context_id, 0) + 1
        try:
            return self._generate(kv, req, on_text, t0, cancel)
        finally:
            with self._lock:
                self._pins[req.context_id] -= 1

    def stream(self, req: GenerateRequest) -> Iterator[str]:
        """Yield text deltas; when the consumer stops early, the generation is cancelled."""
        import queue

        q: queue.Queue = queue.Queue()
        done, cancel = object(), threading.Event()

        def run():
            try:
                self.generate(req, on_text=q.put, cancel=cancel)
            except GenerationCancelled:
                pass
            except Exception as exc:  # relayed to the consumer below
                q.put(exc)
            q.put(done)

        threading.Thread(target=run, daemon=True).start()
        try:
            while (item := q.get()) is not done:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            cancel.set()

    def _open(self, kv: DocKV, tokens: int, pages, cancel=None):
        """A scheduler sequence for one request reading ``pages`` of kv plus ``tokens`` of its own."""
        slot = kv.slot_lens().tolist()
        attended = kv.num_tokens if pages is None else int(sum(slot[p] for p in pages))
        kv_bytes = self.runner.layout.kv_bytes_per_token(self.runner.dtype) * (attended + tokens)
        return self.scheduler.open(kv_bytes=kv_bytes, cancel=cancel)

    def _copy_constraint(self, kv: DocKV, pages: list[int] | None) -> CopyConstraint:
        if kv.token_ids is None:
            raise ValueError("this context has no token ids: copy-constrained decoding is unavailable")
        if pages is not None and any(not 0 <= p < kv.num_pages for p in pages):
            raise ValueError(f"copy_pages out of range for a document of {kv.num_pages} pages")
        if self._end_ids is None:
            vocab = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
            toks = [self.tokenizer.convert_tokens_to_string([t]) if t else "" for t in vocab]
            self._tok_strings = toks
            self._end_ids = {i for i, t in enumerate(toks)
                             if t and t.strip() != "" and t.lstrip()[:1] in _QUOTE_END_CHARS}
            self._end_ids |= {i for i, t in enumerate(toks) if t and "\n" in t and not t.strip()}
        toks, doc = self._tok_strings, kv.token_ids

        def start_ok(i: int) -> bool:
            # A quote starts a sentence at a word: not at a clause number or an all-caps heading.
            prev, cur = toks[doc[i - 1]], toks[doc[i]].strip()
            boundary = prev.endswith("\n") or prev.rstrip().endswith((".", ":", ";"))
            heading = len(cur) > 1 and cur.isupper()
            return boundary and cur[:1].isalpha() and not heading and not prev.strip()[:1].isdigit()

        def end_ok(j: int) -> bool:
            # ... and ends at a sentence end or a line end.
            return toks[doc[j - 1]].rstrip().endswith((".", ";")) or (j < len(doc) and "\n" in toks[doc[j]])

        all_pages = list(range(kv.num_pages)) if pages is None else pages
        return CopyConstraint(doc, all_pages, self.page_size, self._end_ids, start_ok, end_ok)

    def score(self, req: ScoreRequest) -> list[float]:
        """Sum of token log-probs of each option after the prompt (options share the prompt's KV)."""
        self.check_score_request(req)
        kv = self._lookup(req.context_id, req.tenant)
        runner = self.runner
        pages = None if req.pages is None else runner.selected_pages(kv, req.pages)
        prompt_ids = self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        options = [self.tokenizer(o, add_special_tokens=False)["input_ids"] for o in req.options]
        for option, ids in zip(req.options, options):
            if not ids:
                raise ValueError(f"option {option!r} has no tokens")
        scores = []
        with self._open(kv, len(prompt_ids) + max(map(len, options)), pages) as seq:
            base = runner.new_tail(kv)
            first = torch.log_softmax(seq.run(Row(kv, base, prompt_ids, pages)), -1)
            for ids in options:
                tail = base.fork()
                total = float(first[ids[0]])
                if len(ids) > 1:
                    logits = seq.run(Row(kv, tail, ids[:-1], pages, want="all"))
                    logp = torch.log_softmax(logits, -1)
                    total += float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
                scores.append(total / len(ids) if req.per_token else total)
        return scores

    def _generate(self, kv: DocKV, req: GenerateRequest, on_text, t0: float, cancel) -> GenerateResult:
        runner = self.runner
        prompt_ids = self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        pages = None if req.pages is None else runner.selected_pages(kv, req.pages)
        stop_ids = runner.stop_token_ids()
        gen = torch.Generator().manual_seed(req.seed) if req.seed is not None else None
        tail = runner.new_tail(kv)
        copy = self._copy_constraint(kv, req.copy_pages or pages) if req.constraint == "copy" else None
        # Under a copy constraint only the allowed tokens' logits are computed (runner.logits_for):
        # argmax / sampling over them equals it over the full masked vector.
        want = copy.allowed_ids() if copy is not None else None
        # A plain greedy request takes only the argmax: its rows may skip the full output head
        # (ModelRunner.greedy_from_hidden; the same tokens).
        plain_greedy = copy is None and req.temperature <= 0 and (req.sampling is None or req.sampling.is_default)
        kind = "greedy" if plain_greedy else "last"
        with self._open(kv, len(prompt_ids) + req.max_new_tokens, pages, cancel) as seq:

            def step(token: int, ids: list[int] | None) -> torch.Tensor:
                return seq.run(Row(kv, tail, [token], pages, "last" if ids else kind, logit_ids=ids or None))

            try:
                logits = seq.run(Row(kv, tail, prompt_ids, pages, "last" if want else kind, logit_ids=want or None))
                text, out, finish, ttft, emitted = self._decode(req, logits, step, copy, want, stop_ids, gen,
                                                                on_text, t0)
            finally:
                release(tail)  # its batched decode row (GPU path), if it holds one
        if on_text is not None and len(text) > emitted:
            on_text(text[emitted:])
        total = time.perf_counter() - t0
        n_pages = kv.num_pages if pages is None else len(pages)
        slot = kv.slot_lens().tolist()
        attended = kv.num_tokens if pages is None else int(sum(slot[p] for p in pages))
        return GenerateResult(
            text=text,
            token_ids=out,
            prompt_tokens=len(prompt_ids),
            pages_attended=n_pages,
            attended_tokens=attended,
            context_tokens=kv.num_tokens,
            ttft_s=ttft if ttft is not None else total,
            total_s=total,
            finish_reason=finish,
        )

    def _decode(self, req: GenerateRequest, logits: torch.Tensor, step, copy: CopyConstraint | None,
                want: list[int] | None, stop_ids: set[int], gen, on_text, t0: float):
        """The text of the token loop: (text, token ids, finish reason, ttft, chars emitted)."""
        loop = TokenLoop(logits, step, max_new_tokens=req.max_new_tokens, stop_ids=stop_ids,
                         temperature=req.temperature, generator=gen, constraint=copy, allowed=want,
                         sampling=req.sampling)
        out: list[int] = []
        text, emitted, finish = "", 0, None
        for nxt in loop:
            out.append(nxt)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            cut = _first_stop(text, req.stop)
            if cut is not None:
                text, finish = text[:cut], "stop"
                break
            if on_text is not None and len(text) > emitted:
                # Hold back a possible partial stop string at the end, and a trailing
                # U+FFFD: an incomplete multi-byte character that the next token completes.
                safe = min(len(text) - max((len(s) for s in req.stop), default=0),
                           len(text.rstrip("\ufffd")))
                if safe > emitted:
                    on_text(text[emitted:safe])
                    emitted = safe
        ttft = None if loop.first_pick_at is None else loop.first_pick_at - t0
        return text, out, finish or loop.finish, ttft, emitted


_QUOTE_END_CHARS = ('"', "\n", "\u201d")
# Prompt tokens per scheduler step (without, with decode rows running), by device; beside decode
# rows the scheduler also keeps a step within 1.5x a decode-only step by measured costs
# (serving/scheduler.py). CPU: small, since a prompt token costs ~3 ms against ~50 ms for a
# decode step of the 270M model on 2 cores, and 64 bounds how long a new request waits for the
# step in flight (~0.2 s; BENCHMARKS §4g). CUDA: a step is launch-bound, so chunks up to the
# query graphs' largest bucket cost little more than one token (not yet measured).
_STEP_TOKENS = {"cpu": (64, 32), "cuda": (2048, 256)}


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [i for s in stops if s and (i := text.find(s)) >= 0]
    return min(hits) if hits else None
