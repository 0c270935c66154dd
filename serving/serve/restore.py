"""Put a context back together from its durable source.

The directory (Redis, AOF on disk) outlives the store actor; pages and blobs in the object store
do not. After evictions, a store-actor restart or a restart of the whole service, a context that
the directory lists as ready may lack pages (``PagesMissingError``) or blobs (the document with
its offsets, the token ids, the sliding-window KV). ``restore_context`` rebuilds what is missing
from the document text, taken from (in order) the caller (a re-upload), the document blob, or
the copy the directory keeps. Pages are content hashes of their tokens, so a re-prefill of the
same text reproduces the same page ids, and greedy outputs over them are unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from agentctx.kv_store.doc_blob import DOC_BLOB, decode_doc_blob, encode_doc_blob
from agentctx.kv_store.errors import BlobNotFoundError, ContextLostError
from agentctx.serving.serve.checkpoint import resumable_prefill

__all__ = ["restore_context", "RestoreResult", "WINDOW_BLOB", "TOKENS_BLOB"]

log = logging.getLogger(__name__)
WINDOW_BLOB = "sliding_window_kv"
TOKENS_BLOB = "token_ids"


@dataclass(frozen=True)
class RestoreResult:
    pages_put: int  # pages put back into the store
    blobs_put: tuple[str, ...]  # blobs put back
    prefilled: bool  # the document went through the model again

    @property
    def repaired(self) -> bool:
        return bool(self.pages_put or self.blobs_put)


def _document_text(store, context_id: str, tenant: str) -> str:
    """The text of a context: its document blob, else the directory's copy, else ContextLostError."""
    try:
        text, _ = decode_doc_blob(store.get_blob(context_id, DOC_BLOB, tenant=tenant))
        return text
    except BlobNotFoundError:
        pass
    try:
        return store.get_document(context_id, tenant)
    except BlobNotFoundError:
        raise ContextLostError(context_id) from None


def restore_context(replica, context_id: str, tenant: str, text: str | None = None, on_chunk=None) -> RestoreResult:
    """Make every page and blob of a stored context readable again; a no-op when nothing is missing.

    ``replica``: a ``ModelReplica`` bound to the store. ``text``: the document when the caller has
    it (a re-upload of the same text); it is also kept in the directory when it was not.
    ``on_chunk(done, total)``: the re-prefill's progress, when there is one.
    """
    store = replica.store
    if store is None:
        return RestoreResult(0, (), False)
    engine = replica.engine
    rec = store.get_record(context_id, tenant)
    have = store.has_pages(rec.page_ids)
    names = [DOC_BLOB, TOKENS_BLOB] + ([WINDOW_BLOB] if engine.needs_window else [])
    lost = store.missing_blobs(context_id, names)
    if all(have) and not lost:
        if text is not None:
            _keep_document(store, context_id, tenant, text)
        return RestoreResult(0, (), False)
    if text is None:
        text = _document_text(store, context_id, tenant)
    doc = replica.tokenize_document(text, allow_empty=True)
    P = engine.page_size
    token_pages = [doc.token_ids[i : i + P] for i in range(0, len(doc.token_ids), P)]
    page_ids = store.page_hashes(replica.page_namespace, tenant, token_pages)
    if page_ids != list(rec.page_ids):
        raise ContextLostError(context_id, f"context {context_id!r}: the document given does not match its "
                                           "stored pages")
    prefilled = False
    pages_put = 0
    if not all(have) or WINDOW_BLOB in lost:
        checkpoint = None
        if not engine.holds(context_id):  # a replica that still caches it re-publishes without a prefill
            # A restore cut off in turn resumes from its last checkpoint (serving/serve/checkpoint.py).
            _, checkpoint = resumable_prefill(replica, context_id, tenant, doc, False, on_chunk)
            prefilled = True
        num_tokens, pages, window = engine.export(context_id)
        missing = [i for i, ok in enumerate(have) if not ok]
        if missing:  # in the replica's kv_dtype, as prefill_context published them
            store.put_pages([page_ids[i] for i in missing],
                            replica.store_pages([pages[i] for i in missing], missing, num_tokens))
            pages_put = len(missing)
        if WINDOW_BLOB in lost and window is not None:
            store.put_blob(context_id, WINDOW_BLOB, window, tenant=tenant)
        if checkpoint is not None:
            checkpoint.discard()
    if TOKENS_BLOB in lost:
        store.put_blob(context_id, TOKENS_BLOB, torch.tensor(doc.token_ids, dtype=torch.int64), tenant=tenant)
    if DOC_BLOB in lost:
        store.put_blob(context_id, DOC_BLOB, encode_doc_blob(text, doc.offsets), tenant=tenant)
    _keep_document(store, context_id, tenant, text)
    log.info("restored %s: %d page(s), blobs %s, prefilled=%s", context_id, pages_put, lost, prefilled)
    return RestoreResult(pages_put, tuple(lost), prefilled)


def _keep_document(store, context_id: str, tenant: str, text: str) -> None:
    try:
        store.get_document(context_id, tenant)
    except BlobNotFoundError:
        store.put_document(context_id, text, tenant)
