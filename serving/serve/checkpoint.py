"""Prefill checkpoints: a long prefill publishes its pages as it goes, so a cut-off one resumes.

A 128K-token prefill runs ~17 minutes on a 2-core CPU box; a restart or a killed replica at 90 %
used to start it over. Now, every ``prefill_checkpoint_s`` seconds of prefill (at the next chunk
boundary), the replica

* puts the pages completed since the last checkpoint into the store under their usual content
  ids (the final publish then finds them there: nothing is stored twice), and the sliding
  layers' trailing window (what a continuation needs that pages do not hold) as one more object;
* holds all of them under one lease (``KVStore.hold_pages``) of ``prefill_checkpoint_ttl_s``,
  which keeps them from eviction and frees them when it expires unless a context lists them;
* writes a :class:`PrefillCheckpoint` note to the directory (Redis) with the same expiry,
  tenant-scoped and keyed by the context id and the last page id of the whole document, which
  hashes every token, the page size and the page namespace (model, kv dtype): another text, model
  or kv dtype never finds it;
* releases the previous checkpoint's lease (its pages stay held by the new one).

A prefill of the same document then starts from the note's token when its pages and window are
still in the store (else from 0). On success the replica publishes the context as before and
drops the lease and the note; on failure both stay until they expire. Two prefills of one
context at once each keep their own lease and overwrite one note: whichever finishes first drops
it, and a lease the other loses that way only means fewer pages held until its next checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass

from agentctx.kv_store.codec import encode_tensor
from agentctx.kv_store.errors import StoreError
from agentctx.serving.types import PrefillResult, PrefillState, TokenizedDoc

__all__ = ["PrefillCheckpoint", "Checkpointer", "checkpoint_key", "resumable_prefill"]

log = logging.getLogger(__name__)
_VERSION = 1


def checkpoint_key(context_id: str, last_page_id: str) -> str:
    """The note's key: the context and its whole document (the chained hash of its last page)."""
    return "pf-" + hashlib.sha256(f"{context_id}\0{last_page_id}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class PrefillCheckpoint:
    """How far a prefill got: tokens ``[0, done)`` are in pages ``page_ids`` (all full) and the
    sliding layers' window at ``done`` in the object ``window_id`` (None without sliding layers),
    all held by the lease ``hold`` = (hold id, holder id)."""

    context_id: str
    last_page_id: str  # of the whole document: commits to its tokens, page size and namespace
    num_tokens: int
    done: int
    page_ids: list[str]
    window_id: str | None
    hold: tuple[str, str]
    saved_at: float
    version: int = _VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "PrefillCheckpoint":
        data = json.loads(text)
        data["hold"] = tuple(data["hold"])
        return cls(**data)


class Checkpointer:
    """One prefill's checkpoints (a ``PrefillSink``): :meth:`load` before, :meth:`wants` /
    :meth:`take` at chunk boundaries, :meth:`discard` once the context is published."""

    def __init__(self, replica, context_id: str, tenant: str, doc: TokenizedDoc, every_s: float, ttl_s: float):
        self.store = replica.store
        self.replica = replica
        self.context_id, self.tenant = context_id, tenant
        self.page_size = P = replica.engine.page_size
        self.num_tokens = len(doc.token_ids)
        token_pages = [doc.token_ids[i : i + P] for i in range(0, self.num_tokens, P)]
        self.page_ids = self.store.page_hashes(replica.page_namespace, tenant, token_pages)
        self.key = checkpoint_key(context_id, self.page_ids[-1])
        self.every_s, self.ttl_s = every_s, ttl_s
        self.holder = f"prefill-{replica.name}-{uuid.uuid4().hex[:8]}"
        self.pages_put = 0  # pages [0, pages_put) are in the store and held
        self.held: tuple[str, str] | None = None  # the lease of the last checkpoint, ours or not
        self.last_save = time.monotonic()
        self.saves, self.save_s = 0, 0.0

    @classmethod
    def for_replica(cls, replica, context_id: str, tenant: str, doc: TokenizedDoc) -> "Checkpointer | None":
        """None when this replica does not checkpoint: no store, an engine that cannot resume,
        checkpoints off, or a document of one chunk (no boundary to stop at)."""
        cfg = replica.config
        if (replica.store is None or not replica.engine.resumable or cfg.prefill_checkpoint_s is None
                or len(doc.token_ids) <= cfg.prefill_chunk_tokens):
            return None
        return cls(replica, context_id, tenant, doc, cfg.prefill_checkpoint_s, cfg.prefill_checkpoint_ttl_s)

    # ------------------------------------------------------------------ resume
    def load(self) -> PrefillState | None:
        """The state of the last checkpoint of this document, or None (none, expired, another
        layout, or its pages gone with the store actor: the prefill then starts from 0)."""
        try:
            text = self.store.get_checkpoint(self.key, self.tenant)
            if text is None:
                return None
            ck = PrefillCheckpoint.from_json(text)
            self.held = ck.hold  # released by our first checkpoint or by discard()
            P, n_pages = self.page_size, ck.done // self.page_size
            if (ck.version != _VERSION or ck.context_id != self.context_id or ck.last_page_id != self.page_ids[-1]
                    or ck.num_tokens != self.num_tokens or ck.done % P or not 0 < ck.done < self.num_tokens
                    or ck.page_ids != self.page_ids[:n_pages]
                    or (ck.window_id is None) == self.replica.engine.needs_window):
                log.warning("prefill checkpoint %s of %s does not match this document; ignored", self.key,
                            self.context_id)
                return None
            # Pages the engine holds quantised come back as stored (values and scales), so the
            # resumed document holds the very bytes the cut-off prefill wrote.
            got = self.store.get_pages(ck.page_ids + ([ck.window_id] if ck.window_id else []),
                                       quantized=self.replica.engine.pages_quantized)
        except (StoreError, ValueError, TypeError, KeyError) as exc:
            log.warning("prefill checkpoint of %s unusable (%s: %s); prefilling from the start", self.context_id,
                        type(exc).__name__, exc)
            return None
        pages, window = (got[:-1], got[-1]) if ck.window_id else (got, None)
        self.pages_put = n_pages
        log.info("resuming the prefill of %s at token %d of %d", self.context_id, ck.done, self.num_tokens)
        return PrefillState(ck.done, 0, list(pages), window)

    # ------------------------------------------------------------------ PrefillSink
    def wants(self, done: int, total: int) -> int | None:
        if time.monotonic() - self.last_save < self.every_s:
            return None
        return self.pages_put

    def take(self, state: PrefillState) -> None:
        """Publish the state's new pages and window, hold them, note the checkpoint. A store
        failure costs only this checkpoint: it is logged and the prefill goes on."""
        t0 = time.perf_counter()
        done, n_pages = state.num_tokens, state.num_tokens // self.page_size
        try:
            new = list(range(state.first_page, n_pages))
            if new:
                self.store.put_pages([self.page_ids[i] for i in new],
                                     self.replica.store_pages(state.pages, new, self.num_tokens))
            window_id = None
            if state.window is not None:
                # An object by id like a page, not a blob: blobs belong to live contexts, and the
                # lease below must be able to keep it. Raw, in the compute dtype, like WINDOW_BLOB.
                window_id = "pfwin-" + hashlib.sha256(f"{self.key}\0{done}".encode()).hexdigest()[:40]
                self.store.put_pages([window_id], [encode_tensor(state.window.contiguous())])
            held = self.page_ids[:n_pages] + ([window_id] if window_id else [])
            hold = ("pfhold-" + uuid.uuid4().hex, self.holder)
            self.store.hold_pages(hold[0], self.tenant, held, hold[1], self.ttl_s)
            note = PrefillCheckpoint(self.context_id, self.page_ids[-1], self.num_tokens, done,
                                     self.page_ids[:n_pages], window_id, hold, time.time())
            self.store.put_checkpoint(self.key, self.tenant, note.to_json(), self.ttl_s)
        except StoreError as exc:
            log.warning("prefill checkpoint of %s at token %d failed (%s); going on without it", self.context_id,
                        done, exc)
            return
        finally:
            self.last_save = time.monotonic()
        self._release_held()
        self.held, self.pages_put = hold, n_pages
        self.saves += 1
        self.save_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ done
    def discard(self) -> None:
        """After the context is published (its record now lists the pages): drop lease and note."""
        try:
            self.store.delete_checkpoint(self.key, self.tenant)
        except StoreError as exc:
            log.warning("could not delete the prefill checkpoint of %s (%s); it expires", self.context_id, exc)
        self._release_held()

    def _release_held(self) -> None:
        if self.held is None:
            return
        try:
            self.store.release(*self.held)
        except StoreError as exc:
            log.warning("could not release prefill checkpoint lease %s (%s); it expires", self.held[0], exc)
        self.held = None


def resumable_prefill(replica, context_id: str, tenant: str, doc: TokenizedDoc, progress: bool = False,
                      on_chunk=None) -> tuple[PrefillResult, Checkpointer | None]:
    """The replica engine's prefill of ``doc``, from its last checkpoint when there is one, with
    checkpoints as it goes. The caller publishes the context, then calls ``discard()`` on the
    returned checkpointer (None when this replica does not checkpoint)."""
    ck = Checkpointer.for_replica(replica, context_id, tenant, doc)
    if ck is None:
        return replica.engine.prefill(context_id, doc, progress=progress, on_chunk=on_chunk), None
    start = ck.load()
    try:
        result = replica.engine.prefill(context_id, doc, progress=progress, on_chunk=on_chunk, start=start, sink=ck)
    finally:
        replica.metrics["checkpoint_saves"] += ck.saves
        replica.metrics["checkpoint_s_sum"] += ck.save_s
    return result, ck
