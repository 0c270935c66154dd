"""DevicePageCache: a replica's LRU cache of pages on its accelerator.

The host tier (object store) holds every page once per node; each model
replica keeps the pages it is attending over on its device. Pages in use by a
running forward pass are *pinned* (a count, so nested users compose) and are
never evicted; unpinned pages are evicted least-recently-used first when a new
page needs room. Pure torch: on CPU the "device" copy is the host tensor itself,
which is what the tests exercise.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .errors import DeviceCacheFullError, InvalidInputError

__all__ = ["DevicePageCache"]


@dataclass
class _Slot:
    tensor: torch.Tensor
    nbytes: int
    pins: int = 0


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class DevicePageCache:
    """Byte-capacity LRU of device tensors keyed by page id, with pinning."""

    def __init__(self, capacity_bytes: int, device: str | torch.device = "cpu") -> None:
        if capacity_bytes <= 0:
            raise InvalidInputError("capacity_bytes must be positive")
        self.capacity_bytes = int(capacity_bytes)
        self.device = torch.device(device)
        self._slots: OrderedDict[str, _Slot] = OrderedDict()  # LRU first
        self._bytes = 0
        self._lock = threading.RLock()
        self.hits = self.misses = self.evictions = 0

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def _make_room(self, need: int) -> None:
        if need > self.capacity_bytes:
            raise DeviceCacheFullError(f"page of {need} bytes exceeds the cache capacity {self.capacity_bytes}",
                                       retryable=False)
        for page_id in list(self._slots):
            if self._bytes + need <= self.capacity_bytes:
                return
            slot = self._slots[page_id]
            if slot.pins == 0:
                del self._slots[page_id]
                self._bytes -= slot.nbytes
                self.evictions += 1
        if self._bytes + need > self.capacity_bytes:
            raise DeviceCacheFullError(
                f"device cache full: {self._bytes} of {self.capacity_bytes} bytes pinned, {need} more needed")

    def put(self, page_id: str, tensor: torch.Tensor, pin: bool = False) -> torch.Tensor:
        """Copy a page to the device (if not cached) and return the device tensor."""
        with self._lock:
            slot = self._slots.get(page_id)
            if slot is None:
                dev = tensor.to(self.device, non_blocking=True)
                self._make_room(_nbytes(dev))
                slot = self._slots[page_id] = _Slot(dev, _nbytes(dev))
                self._bytes += slot.nbytes
            self._slots.move_to_end(page_id)
            slot.pins += int(pin)
            return slot.tensor

    def get(self, page_id: str, pin: bool = False) -> torch.Tensor | None:
        """The cached tensor (counted as a hit) or None (a miss)."""
        with self._lock:
            slot = self._slots.get(page_id)
            if slot is None:
                self.misses += 1
                return None
            self.hits += 1
            self._slots.move_to_end(page_id)
            slot.pins += int(pin)
            return slot.tensor

    def pin(self, page_ids: Sequence[str]) -> None:
        with self._lock:
            absent = [p for p in page_ids if p not in self._slots]
            if absent:
                raise KeyError(f"cannot pin {len(absent)} uncached page(s)")
            for p in page_ids:
                self._slots[p].pins += 1

    def unpin(self, page_ids: Sequence[str]) -> None:
        with self._lock:
            for p in page_ids:
                slot = self._slots.get(p)
                if slot is not None and slot.pins > 0:
                    slot.pins -= 1

    def pinned_count(self, page_id: str) -> int:
        slot = self._slots.get(page_id)
        return slot.pins if slot else 0

    def get_many(self, page_ids: Sequence[str], load: Callable[[list[str]], list[torch.Tensor]],
                 pin: bool = False) -> list[torch.Tensor]:
        """Device tensors for ``page_ids``; ``load(missing_ids)`` fetches misses from the host tier.

        With ``pin``, every returned page stays pinned until :meth:`unpin`;
        on failure nothing this call pinned stays pinned.
        """
        with self._lock:
            out: dict[str, torch.Tensor] = {}
            pinned: list[str] = []
            try:
                for p in dict.fromkeys(page_ids):
                    t = self.get(p, pin=pin)
                    if t is not None:
                        out[p] = t
                        pinned += [p] if pin else []
                missing = [p for p in dict.fromkeys(page_ids) if p not in out]
                if missing:
                    loaded = load(missing)
                    if len(loaded) != len(missing):
                        raise InvalidInputError("loader returned the wrong number of pages")
                    for p, t in zip(missing, loaded):
                        # Pin while inserting so the pages of this very call can't evict each other.
                        out[p] = self.put(p, t, pin=True)
                        pinned.append(p)
                    if not pin:
                        self.unpin(missing)
                        pinned = [p for p in pinned if p not in set(missing)]
            except BaseException:
                if pinned:
                    self.unpin(pinned)
                raise
            return [out[p] for p in page_ids]

    @contextmanager
    def pinned(self, page_ids: Sequence[str], load: Callable[[list[str]], list[torch.Tensor]]
               ) -> Iterator[list[torch.Tensor]]:
        """``with cache.pinned(ids, load) as pages:`` — pinned for the block, unpinned after."""
        tensors = self.get_many(page_ids, load, pin=True)
        try:
            yield tensors
        finally:
            self.unpin(list(dict.fromkeys(page_ids)))

    def evict(self, page_id: str) -> bool:
        """Drop an unpinned page now; False if absent or pinned."""
        with self._lock:
            slot = self._slots.get(page_id)
            if slot is None or slot.pins:
                return False
            del self._slots[page_id]
            self._bytes -= slot.nbytes
            return True

    def clear(self) -> None:
        """Drop every unpinned page."""
        with self._lock:
            for p in [p for p, s in self._slots.items() if s.pins == 0]:
                self.evict(p)

    def stats(self) -> dict[str, int | str]:
        with self._lock:
            return {"device": str(self.device), "pages": len(self._slots), "bytes": self._bytes,
                    "capacity_bytes": self.capacity_bytes,
                    "pinned": sum(1 for s in self._slots.values() if s.pins), "hits": self.hits,
                    "misses": self.misses, "evictions": self.evictions}
