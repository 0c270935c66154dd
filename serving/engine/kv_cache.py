"""The one owner of a replica's device KV memory: which contexts are on the device, who pins them,
what they cost, and what goes when the budget is exceeded.

Each context's entry is its :class:`~agentctx.serving.runner.paged_kv.DocKV` (pages, sliding
windows) together with what lives and dies with it: the static query slots, the batched decode
rows and their CUDA graphs (``DocKV.query_slots`` / ``DocKV.batch_slots``, made on first use by
the runner). ``nbytes()`` counts all of it. A running request pins its context; eviction takes
unpinned contexts, least recently used first, and always keeps the newest one (a context larger
than the whole budget still serves, alone).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from agentctx.serving.runner.paged_kv import DocKV

__all__ = ["DeviceKVCache"]


class DeviceKVCache:
    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._docs: OrderedDict[str, DocKV] = OrderedDict()
        self._pins: dict[str, int] = {}
        self._lock = threading.RLock()
        self.evictions = 0

    def __contains__(self, context_id: str) -> bool:
        with self._lock:
            return context_id in self._docs

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)

    def get(self, context_id: str) -> DocKV | None:
        """The context's KV (now the most recently used), or None."""
        with self._lock:
            doc = self._docs.get(context_id)
            if doc is not None:
                self._docs.move_to_end(context_id)
            return doc

    def put(self, context_id: str, doc: DocKV) -> None:
        """Hold a context's KV (replacing any earlier one), then evict what exceeds the budget."""
        with self._lock:
            self._docs[context_id] = doc
            self._docs.move_to_end(context_id)
            self._evict()

    def drop(self, context_id: str) -> bool:
        """Forget a context (the shared store keeps it); False when it was not held."""
        with self._lock:
            self._pins.pop(context_id, None)
            return self._docs.pop(context_id, None) is not None

    def pin(self, context_id: str) -> None:
        with self._lock:
            self._pins[context_id] = self._pins.get(context_id, 0) + 1

    def release(self, context_id: str) -> None:
        with self._lock:
            left = self._pins.get(context_id, 0) - 1
            if left > 0:
                self._pins[context_id] = left
            else:
                self._pins.pop(context_id, None)
            self._evict()

    @contextmanager
    def pinned(self, context_id: str) -> Iterator[None]:
        self.pin(context_id)
        try:
            yield
        finally:
            self.release(context_id)

    def pins(self, context_id: str) -> int:
        with self._lock:
            return self._pins.get(context_id, 0)

    def nbytes(self) -> int:
        """Device bytes of every held context: KV, static slots and graph memory."""
        with self._lock:
            return sum(d.device_bytes() for d in self._docs.values())

    def _evict(self) -> None:
        total = sum(d.device_bytes() for d in self._docs.values())
        for cid in list(self._docs):
            if total <= self.budget_bytes or len(self._docs) <= 1:
                break
            if self._pins.get(cid, 0) == 0:
                total -= self._docs.pop(cid).device_bytes()
                self.evictions += 1
