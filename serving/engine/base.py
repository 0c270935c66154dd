"""What every engine backend offers a replica: our paged engine (serving/engine/local.py) and vLLM's
prompt-level mode (serving/vllm_engine.py).

One API on one object: ``generate`` / ``score`` / ``stream`` for callers on threads, and
``agenerate`` / ``astream_events`` for the Serve deployment's event loop. An engine tokenizes
documents, prefills them once, keeps the contexts it serves on its device and fetches the ones
it lacks through a ``page_loader`` (the shared KV store), so any replica serves any context.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol

import torch

from agentctx.serving.types import (
    EmptyInputError,
    GenerateRequest,
    GenerateResult,
    PrefillResult,
    PrefillState,
    ScoreRequest,
    TokenizedDoc,
)

__all__ = ["Engine", "ContextNotLoadedError", "PageLoader", "PrefillState", "PrefillSink"]

# page_loader(context_id, tenant) -> (num_tokens, [page tensors], window tensor | None, token ids)
PageLoader = Callable[[str, str], tuple[int, list[torch.Tensor], torch.Tensor | None, list[int]]]


class PrefillSink(Protocol):
    """Takes a prefill's state at chunk boundaries (serving/serve/checkpoint.py). It runs on the
    caller's thread between two chunks, so the engine loop keeps stepping other requests."""

    def wants(self, done: int, total: int) -> int | None:
        """None: no state now; else the first page the state must carry (those before are saved)."""

    def take(self, state: PrefillState) -> None:
        """Keep the state; an exception here fails the prefill."""


class ContextNotLoadedError(KeyError):
    """The engine holds no KV for this context and has no store to fetch it from."""


class Engine(ABC):
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

    @property
    def resumable(self) -> bool:
        """Whether ``prefill`` takes ``start`` and ``sink`` (a prefill resumed from a checkpoint)."""
        return False

    @property
    def pages_quantized(self) -> bool:
        """Whether this engine holds pages quantised (fp8 / int8 values and scales), so the store
        should hand them back as stored rather than dequantised."""
        return False

    @property
    def max_running(self) -> int:
        """Requests the engine runs at once (the Serve deployment's concurrency follows it)."""
        return 8

    # ------------------------------------------------------------------ documents
    @abstractmethod
    def tokenize_document(self, text: str) -> TokenizedDoc: ...

    @abstractmethod
    def prefill(self, context_id: str, doc: TokenizedDoc, progress: bool = True,
                on_chunk: Callable[[int, int], None] | None = None, *, start: PrefillState | None = None,
                sink: PrefillSink | None = None) -> PrefillResult:
        """Compute the document's KV once; ``on_chunk(done, total)`` as it goes (tokens). Where
        ``resumable``: from ``start`` (tokens before it not computed again), handing ``sink`` the
        state at chunk boundaries."""

    @abstractmethod
    def export(self, context_id: str) -> tuple[int, list[torch.Tensor], torch.Tensor | None]:
        """(num_tokens, page tensors on CPU, window tensor or None) to publish to the shared store."""

    # ------------------------------------------------------------------ the contexts it holds
    @abstractmethod
    def _cached(self, context_id: str):
        """The cache entry of a held context (now the most recently used), or None."""

    @abstractmethod
    def _insert(self, context_id: str, entry) -> None: ...

    @abstractmethod
    def _from_store(self, num_tokens: int, pages: list[torch.Tensor], window: torch.Tensor | None,
                    token_ids: list[int]):
        """This engine's cache entry from what page_loader returns."""

    @abstractmethod
    def holds(self, context_id: str) -> bool: ...

    @abstractmethod
    def drop(self, context_id: str) -> bool:
        """Forget a context on this replica (the shared store keeps it)."""

    @abstractmethod
    def cached_bytes(self) -> int: ...

    @abstractmethod
    def describe(self) -> dict:
        """Device, dtype, KV bytes per token, cached contexts: what /v1/models and info() report."""

    def _lookup(self, context_id: str, tenant: str | None):
        """The cache entry of a context; on a miss, built from the shared store via page_loader."""
        entry = self._cached(context_id)
        if entry is not None:
            self.stats["cache_hits"] += 1
            return entry
        self.stats["cache_misses"] += 1
        if self.page_loader is None:
            raise ContextNotLoadedError(f"context {context_id!r} is not loaded on this replica")
        entry = self._from_store(*self.page_loader(context_id, tenant or "default"))
        self.stats["loads"] += 1
        self._insert(context_id, entry)
        return entry

    # ------------------------------------------------------------------ requests
    @abstractmethod
    def generate(self, req: GenerateRequest, on_text: Callable[[str], None] | None = None) -> GenerateResult: ...

    @abstractmethod
    def score(self, req: ScoreRequest) -> list[float]: ...

    @staticmethod
    def check_request(req: GenerateRequest) -> None:
        """What every engine refuses before touching a context."""
        if not req.prompt or not req.prompt.strip():
            raise EmptyInputError("prompt is empty")
        if req.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {req.max_new_tokens}")
        if req.min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {req.min_tokens}")

    @staticmethod
    def check_score_request(req: ScoreRequest) -> None:
        if not req.options:
            raise ValueError("score needs at least one option")
        if not req.prompt:
            raise EmptyInputError("prompt is empty")

    def stream(self, req: GenerateRequest) -> Iterator[str]:
        """Yield text deltas; this default runs generate in a thread and relays its callback."""
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

    async def agenerate(self, req: GenerateRequest) -> GenerateResult:
        """generate for an event loop; this default runs it on a worker thread."""
        return await asyncio.to_thread(self.generate, req)

    async def ascore(self, req: ScoreRequest) -> list[float]:
        return await asyncio.to_thread(self.score, req)

    async def astream_events(self, req: GenerateRequest) -> AsyncIterator[tuple[str, object]]:
        """``("delta", text)`` items, then one ``("result", GenerateResult)``; this default runs
        generate on a worker thread that stops at its next delta once the consumer has gone."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()
        gone = threading.Event()

        def on_text(delta: str) -> None:
            if gone.is_set():
                raise _ConsumerGone()
            loop.call_soon_threadsafe(items.put_nowait, ("delta", delta))

        def run() -> None:
            try:
                item = ("result", self.generate(req, on_text=on_text))
            except BaseException as exc:  # relayed to the consumer
                item = ("error", exc)
            loop.call_soon_threadsafe(items.put_nowait, item)

        threading.Thread(target=run, name="engine-stream", daemon=True).start()
        try:
            while True:
                kind, value = await items.get()
                if kind == "error":
                    if isinstance(value, _ConsumerGone):
                        return
                    raise value
                yield kind, value
                if kind == "result":
                    return
        finally:
            gone.set()

    @abstractmethod
    def close(self) -> None:
        """Stop background work (threads, processes); the engine serves nothing after."""


class _ConsumerGone(Exception):
    """Raised inside a generation whose stream consumer has gone away."""
