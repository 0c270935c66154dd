"""The thread that steps vLLM's ``LLMEngine`` for ``VLLMEngine`` (serving/vllm_engine.py).

vLLM's ``LLMEngine`` advances only when someone calls ``step()``. ``_Driver`` owns one engine
and a daemon thread that steps it while any request is open: callers on any thread add token-id
prompts (``submit``) and read the engine's outputs from a queue of their own, so concurrent
agents share vLLM's batches. A queue ends with ``None``; a failed step puts the exception into
every open queue first, so a waiter never blocks on a dead engine.

Kept apart from the engine: this is the threading and the queue protocol, the engine is
documents, prompts and results. vLLM stays an optional import: it is imported inside
``submit`` only.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid

__all__: list[str] = []  # _Driver is internal to serving/vllm_engine.py

log = logging.getLogger(__name__)


class _Driver:
    """Steps one LLMEngine in a background thread; requests from any thread are batched."""

    def __init__(self, engine):
        self.engine = engine
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queues: dict[str, queue.Queue] = {}
        self._thread = threading.Thread(target=self._loop, name="vllm-driver", daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: list[int], params) -> tuple[str, queue.Queue]:
        from vllm.inputs import TokensPrompt

        rid = f"agentctx-{uuid.uuid4().hex}"
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._queues[rid] = q
            try:
                self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(prompt_ids)), params)
            except Exception:
                self._queues.pop(rid, None)
                raise
            self._wake.notify()
        return rid, q

    def submit_many(self, jobs) -> list[list]:
        """Run (prompt_ids, params) jobs together; returns each job's list of outputs."""
        handles = [self.submit(ids, p) for ids, p in jobs]
        results = []
        for _rid, q in handles:
            outs = []
            while (out := q.get()) is not None:
                if isinstance(out, Exception):
                    raise out
                outs.append(out)
            results.append(outs)
        return results

    def abort(self, rid: str) -> None:
        with self._lock:
            if self._queues.pop(rid, None) is not None:
                self.engine.abort_request([rid])

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._queues:
                    self._wake.wait()
                try:
                    outs = self.engine.step()
                except Exception as exc:  # noqa: BLE001 - fail every waiter, keep the thread
                    log.exception("vLLM engine step failed")
                    for q in self._queues.values():
                        q.put(exc)
                        q.put(None)
                    self._queues.clear()
                    continue
                for out in outs:
                    q = self._queues.get(out.request_id)
                    if q is None:
                        continue
                    q.put(out)
                    if out.finished:
                        q.put(None)
                        self._queues.pop(out.request_id, None)
