"""Page retrieval for agentctx: which KV pages of a shared document a query attends to.

Pipeline: :func:`build_chunks` (pages → text) → :class:`Embedder` (cached
MiniLM vectors) → :class:`HierarchicalIndex` (sections → pages), wrapped per
document by :class:`DocumentIndex`; :func:`plan` turns a query and a
:class:`SelectionPolicy` into an :class:`AttendPlan`. :mod:`.key_scorer`
scores pages from the KV keys themselves (Quest bounds) for fusion.

Heavy dependencies (torch, sentence-transformers, faiss) load lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Chunk",
    "build_chunks",
    "page_char_spans",
    "Embedder",
    "VectorIndex",
    "FaissFlatIndex",
    "FaissHNSWIndex",
    "make_index",
    "HierarchicalIndex",
    "RetrieveResult",
    "DocumentIndex",
    "BuildStats",
    "PageRetriever",
    "SelectionPolicy",
    "AttendPlan",
    "plan",
    "plan_from_ranking",
    "page_key_bounds",
    "quest_scores",
    "reciprocal_rank_fusion",
    "fuse_rankings",
]

# Public name -> submodule; resolved on first access so `import retrieval`
# stays cheap (key_scorer pulls in torch, embedding pulls sentence-transformers).
_WHERE = {
    "Chunk": "chunking",
    "build_chunks": "chunking",
    "page_char_spans": "chunking",
    "Embedder": "embedding",
    "VectorIndex": "index",
    "FaissFlatIndex": "index",
    "FaissHNSWIndex": "index",
    "make_index": "index",
    "HierarchicalIndex": "hierarchical",
    "RetrieveResult": "hierarchical",
    "DocumentIndex": "document",
    "BuildStats": "document",
    "PageRetriever": "document",
    "SelectionPolicy": "policy",
    "AttendPlan": "policy",
    "plan": "policy",
    "plan_from_ranking": "policy",
    "page_key_bounds": "key_scorer",
    "quest_scores": "key_scorer",
    "reciprocal_rank_fusion": "fusion",
    "fuse_rankings": "key_scorer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # static checkers see real imports
    from .chunking import Chunk, build_chunks, page_char_spans
    from .document import BuildStats, DocumentIndex, PageRetriever
    from .embedding import Embedder
    from .fusion import reciprocal_rank_fusion
    from .hierarchical import HierarchicalIndex, RetrieveResult
    from .index import FaissFlatIndex, FaissHNSWIndex, VectorIndex, make_index
    from .key_scorer import fuse_rankings, page_key_bounds, quest_scores
    from .policy import AttendPlan, SelectionPolicy, plan, plan_from_ranking
