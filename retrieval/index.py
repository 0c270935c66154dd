"""Vector indexes over normalised embeddings (inner product = cosine).

``FaissFlatIndex`` is exact and is the right choice up to a few hundred
thousand vectors (a 1M-token document is ~8K vectors); ``FaissHNSWIndex`` is
approximate and sub-linear for larger collections. ``make_index`` picks one by
size, and moves the flat index to a GPU when FAISS sees one. FAISS is imported
lazily so that importing :mod:`retrieval` never requires it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

__all__ = [
    "VectorIndex",
    "FaissFlatIndex",
    "FaissHNSWIndex",
    "make_index",
    "HNSW_THRESHOLD",
    "import_faiss",
    "score_rows",
]

# Below this many vectors an exact scan costs well under a millisecond per
# query on CPU, so approximation buys nothing and loses recall.
HNSW_THRESHOLD = 200_000

# Queries per call below which FAISS runs on one OpenMP thread. A single query
# over ~13K vectors takes ~1 ms on one thread but ~24 ms on two when the cores
# are shared: OpenMP's barrier then waits for a descheduled thread.
SINGLE_THREAD_BELOW = 8
_OMP_LOCK = threading.Lock()


@contextmanager
def _omp_threads(faiss: Any, n: int | None) -> Iterator[None]:
    if n is None or not hasattr(faiss, "omp_set_num_threads"):
        yield
        return
    with _OMP_LOCK:  # process-global setting; serialise the swap
        prev = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(n)
        try:
            yield
        finally:
            faiss.omp_set_num_threads(prev)


# numpy's BLAS (OpenBLAS, one thread per core) for the matrix-vector product of a plan: every
# passage vector against the query. On a busy box a second thread's barrier waits for a
# descheduled thread (up to 443 ms seen at load 3.4): with 4 busy processes on 2 cores, 1.5K
# passages took 13.4 ms at the median on two threads and 0.14 ms on one. At 1M tokens (50K x 384,
# memory-bound) one thread is as fast under load (p99 ~22 ms both) but 6.0 ms for 2.9 ms idle.
_BLAS_LOCK = threading.Lock()
_blas: Any = None  # threadpoolctl controller of the loaded BLAS libraries; False without it


def _blas_controller() -> Any:
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - depends on the environment
            _blas = False
        else:
            # Made once: finding the libraries costs 0.5-5 ms, a limit around a call ~15 us.
            _blas = ThreadpoolController().select(user_api="blas")
    return _blas


@contextmanager
def _blas_threads(n: int) -> Iterator[None]:
    """Run with at most ``n`` BLAS threads (numpy's), restoring the previous count."""
    with _BLAS_LOCK:  # process-global setting; serialise the swap
        ctl = _blas_controller()
        if not ctl:
            yield
            return
        with ctl.limit(limits=n):
            yield


def score_rows(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``vectors @ query`` on one BLAS thread: ``(n, dim)`` x ``(dim,)`` -> ``(n,)``, in the
    vectors' dtype. One thread gives the same numbers as several (rows are split, not sums)."""
    query = np.asarray(query, dtype=vectors.dtype).reshape(-1)
    with _blas_threads(1):
        return vectors @ query


def import_faiss() -> Any:
    """Import faiss or explain how to get it."""
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "retrieval needs FAISS: `pip install faiss-cpu` (or faiss-gpu on CUDA hosts)"
        ) from exc
    return faiss


def _as_matrix(x: np.ndarray, dim: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"expected (n, dim) vectors, got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"expected dim {dim}, got {x.shape[1]}")
    return x


class VectorIndex(ABC):
    """Inner-product index mapping vectors to caller-chosen int64 ids."""

    def __init__(self, dim: int) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of vectors stored."""

    @abstractmethod
    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Add ``(n, dim)`` float32 vectors with ``(n,)`` int64 ids (default: running count)."""

    @abstractmethod
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by inner product.

        Args:
            queries: ``(q, dim)`` float32 (or ``(dim,)`` for one query).
            k: results per query; clipped to ``size``.

        Returns:
            ``(scores, ids)``, both ``(q, k')`` with ``k' = min(k, size)``,
            best first; float32 scores and int64 ids.
        """


class _FaissIndex(VectorIndex):
    """Shared id bookkeeping: FAISS stores positions, we map them to ids."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self._ids = np.empty(0, dtype=np.int64)
        self._index: Any = None

    @property
    def size(self) -> int:
        return int(self._ids.shape[0])

    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        vecs = _as_matrix(vectors, self.dim)
        if ids is None:
            ids = np.arange(self.size, self.size + len(vecs), dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(vecs):
            raise ValueError(f"{len(vecs)} vectors but {len(ids)} ids")
        self._index.add(vecs)
        self._ids = np.concatenate([self._ids, ids])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = _as_matrix(queries, self.dim)
        k = min(int(k), self.size)
        if k <= 0:
            return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64)
        faiss = import_faiss()
        with _omp_threads(faiss, 1 if len(q) < SINGLE_THREAD_BELOW else None):
            scores, pos = self._index.search(q, k)
        # FAISS pads with -1 when it finds fewer than k (possible with HNSW).
        ids = np.where(pos >= 0, self._ids[np.clip(pos, 0, None)], -1)
        return scores.astype(np.float32, copy=False), ids.astype(np.int64, copy=False)


class FaissFlatIndex(_FaissIndex):
    """Exact inner-product search (``IndexFlatIP``), on GPU when requested."""

    def __init__(self, dim: int, use_gpu: bool = False) -> None:
        super().__init__(dim)
        faiss = import_faiss()
        index = faiss.IndexFlatIP(dim)
        if use_gpu:
            index = faiss.index_cpu_to_all_gpus(index)
        self._index = index
        self.on_gpu = use_gpu


class FaissHNSWIndex(_FaissIndex):
    """Approximate inner-product search with an HNSW graph (CPU).

    ``m`` is graph degree; ``ef_search`` trades latency for recall and is
    raised to ``k`` at query time so that a large ``k`` stays accurate.
    """

    def __init__(self, dim: int, m: int = 32, ef_construction: int = 200, ef_search: int = 128) -> None:
        super().__init__(dim)
        faiss = import_faiss()
        self._index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = ef_construction
        self.ef_search = ef_search

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._index.hnsw.efSearch = max(self.ef_search, int(k))
        return super().search(queries, k)


def make_index(n: int, dim: int, *, hnsw_threshold: int = HNSW_THRESHOLD, use_gpu: bool | None = None) -> VectorIndex:
    """Index suited to ``n`` vectors of ``dim``: exact below ``hnsw_threshold``, else HNSW.

    ``use_gpu=None`` means "when FAISS reports a GPU"; a GPU flat index is
    exact and fast at any size, so it is preferred over HNSW there.
    """
    faiss = import_faiss()
    if use_gpu is None:
        try:
            use_gpu = faiss.get_num_gpus() > 0
        except AttributeError:  # CPU-only builds may lack the symbol
            use_gpu = False
    if use_gpu:
        return FaissFlatIndex(dim, use_gpu=True)
    if n < hnsw_threshold:
        return FaissFlatIndex(dim)
    return FaissHNSWIndex(dim)
