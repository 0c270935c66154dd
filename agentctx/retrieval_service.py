"""RetrievalService: one embedder and the page indices of loaded contexts.

Runs as a named Ray actor so agents share one MiniLM model and one index per
context instead of each loading their own. An index is built from the document
text and the LLM tokenizer's offsets (stored as context blobs), so a restarted
service rebuilds any context from the store; chunk embeddings come from the
on-disk cache, so a rebuild embeds nothing again.
"""

from __future__ import annotations

import logging
import threading

from agentctx.kv_store.doc_blob import DOC_BLOB, decode_doc_blob
from agentctx.retrieval.document import DocumentIndex
from agentctx.retrieval.embedding import Embedder
from agentctx.retrieval.policy import AttendPlan, SelectionPolicy, plan

__all__ = ["RetrievalService"]

log = logging.getLogger(__name__)
class RetrievalService:
    """Per-context page indices; ``plan`` turns a query into an AttendPlan."""

    def __init__(self, page_size: int = 256, section_pages: int = 16, store_url: str | None = None,
                 namespace: str = "agentctx"):
        self.page_size = page_size
        self.section_pages = section_pages
        self.store_url = store_url
        self.namespace = namespace
        self.embedder = Embedder()
        self._indices: dict[str, DocumentIndex] = {}
        self._lock = threading.Lock()

    def index_document(self, context_id: str, text: str, offsets: list[tuple[int, int]]) -> dict:
        """Build (or reuse) the index of a context; returns build stats."""
        with self._lock:
            if context_id in self._indices:
                return {"reused": True, "num_pages": self._indices[context_id].num_pages}
        idx = DocumentIndex(text, offsets, page_size=self.page_size, embedder=self.embedder)
        with self._lock:
            self._indices[context_id] = idx
        s = idx.stats
        return {"reused": False, "num_pages": s.num_pages, "num_passages": s.num_passages,
                "embed_s": s.embed_seconds, "index_s": s.total_seconds - s.embed_seconds,
                "texts_encoded": s.texts_encoded}

    def _index(self, context_id: str, tenant: str) -> DocumentIndex:
        with self._lock:
            idx = self._indices.get(context_id)
        if idx is not None:
            return idx
        # Not built here (service restarted, or another process loaded it): rebuild from the store.
        from agentctx.kv_store import KVStore

        store = KVStore.connect_cached(self.store_url, self.namespace)
        text, offsets = decode_doc_blob(store.get_blob(context_id, DOC_BLOB, tenant=tenant))
        self.index_document(context_id, text, offsets)
        with self._lock:
            return self._indices[context_id]

    def plan(self, context_id: str, tenant: str, query: str, policy: SelectionPolicy,
             scope: tuple[int, int] | None = None) -> AttendPlan:
        """The attend plan of ``query``; ``scope`` (a char range) keeps retrieval inside it."""
        if policy.page_size_tokens != self.page_size:
            raise ValueError(f"policy page size {policy.page_size_tokens} != context page size {self.page_size}")
        idx = self._index(context_id, tenant)
        return plan(query, idx, idx.num_pages, idx.last_page_len, policy, scope=scope)

    def rank_texts(self, query: str, texts: list[str]) -> list[float]:
        """Cosine similarity of each text to the query (embeddings cached like chunks)."""
        if not query.strip():
            raise ValueError("query is empty")
        if not texts:
            return []
        q = self.embedder.embed_query(query)
        return (self.embedder.embed(list(texts), show_progress=False) @ q).tolist()

    def drop(self, context_id: str) -> bool:
        with self._lock:
            return self._indices.pop(context_id, None) is not None

    def stats(self) -> dict:
        return {"contexts": len(self._indices), "texts_encoded": self.embedder.texts_encoded,
                "cache_hits": self.embedder.cache_hits}
