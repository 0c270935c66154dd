from __future__ import annotations

import os

import numpy as np
import pytest

from agentctx.retrieval import document as document_module
from agentctx.retrieval import index as index_module
from agentctx.retrieval.hierarchical import HierarchicalIndex
from agentctx.retrieval.index import FaissFlatIndex, FaissHNSWIndex, make_index, score_rows


def _unit(rng, n, d=32):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_matches_brute_force_and_maps_ids():
    rng = np.random.default_rng(0)
    x, q = _unit(rng, 300), _unit(rng, 5)
    ids = np.arange(1000, 1300)
    idx = FaissFlatIndex(32)
    idx.add(x[:100], ids[:100])
    idx.add(x[100:], ids[100:])
    assert idx.size == 300 and idx.dim == 32
    scores, got = idx.search(q, 7)
    want = np.argsort(-(q @ x.T), axis=1)[:, :7] + 1000
    assert np.array_equal(got, want)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    s1, i1 = idx.search(q[0], 500)  # k clipped to size; 1-D query accepted
    assert s1.shape == (1, 300) and i1.shape == (1, 300)


def test_hnsw_finds_near_duplicates():
    rng = np.random.default_rng(1)
    x = _unit(rng, 2000)
    idx = FaissHNSWIndex(32, m=16)
    idx.add(x)
    _, got = idx.search(x[:20], 1)
    assert (got[:, 0] == np.arange(20)).mean() >= 0.95


def test_make_index_choice_and_errors():
    assert isinstance(make_index(10, 8, use_gpu=False), FaissFlatIndex)
    assert isinstance(make_index(10, 8, hnsw_threshold=5, use_gpu=False), FaissHNSWIndex)
    idx = make_index(10, 8)
    with pytest.raises(ValueError):
        idx.add(np.zeros((2, 9), np.float32))
    with pytest.raises(ValueError):
        idx.add(np.zeros((2, 8), np.float32), np.arange(3))


def test_flat_and_hierarchical_agree_on_small_docs():
    rng = np.random.default_rng(2)
    pages = np.repeat(np.arange(40), 2)  # two views per page
    vecs = _unit(rng, len(pages))
    q = _unit(rng, 6)
    flat = HierarchicalIndex(vecs, pages)  # 40 pages: below threshold -> flat
    assert flat.mode == "flat"
    # Forced two-level with enough fan-out to visit every section: must agree exactly.
    hier = HierarchicalIndex(vecs, pages, flat_below_pages=0, section_pages=8, fanout=100.0)
    assert hier.mode == "hierarchical"
    for row in q:
        a = flat.search(row, 10)[0]
        b = hier.search(row, 10)[0]
        c = flat.search_flat(row, 10)
        assert a.pages.tolist() == b.pages.tolist() == c.pages.tolist()
        assert np.allclose(a.scores, b.scores, atol=1e-5)
        assert len(set(a.pages.tolist())) == 10  # pages are distinct
        # page score = max over its views
        best = max(vecs[pages == a.pages[0]] @ row)
        assert abs(a.scores[0] - best) < 1e-5


def test_hierarchical_routes_to_the_right_section():
    rng = np.random.default_rng(3)
    n_pages, d = 64, 32
    topics = _unit(rng, 4, d)
    pages = np.arange(n_pages)
    # Section s (16 pages) is about topic s: its vectors sit near that topic.
    vecs = topics[pages // 16] + 0.3 * _unit(rng, n_pages, d)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    hier = HierarchicalIndex(vecs, pages, flat_below_pages=0, section_pages=16, min_sections=1, fanout=1.0)
    res = hier.search(topics[2], 5)[0]
    assert res.sections_searched == 1
    assert all(32 <= p < 48 for p in res.pages.tolist())
    assert res.search_seconds >= 0 and res.mode == "hierarchical"


def test_k_larger_than_pages_and_empty():
    rng = np.random.default_rng(4)
    h = HierarchicalIndex(_unit(rng, 6), np.array([0, 0, 1, 1, 2, 2]))
    assert sorted(h.search(_unit(rng, 1)[0], 50)[0].pages.tolist()) == [0, 1, 2]
    with pytest.raises(ValueError):
        HierarchicalIndex(np.zeros((0, 4), np.float32), np.zeros(0))


def _numpy_blas_thread_counts() -> list[int]:
    """Thread counts of the BLAS libraries numpy links (loaded before any test runs). Other
    BLAS copies loaded later (faiss', torch's) are not numpy's and are left alone."""
    from threadpoolctl import threadpool_info

    numpy_dir = os.path.dirname(np.__file__) + ".libs"
    return [
        lib["num_threads"]
        for lib in threadpool_info()
        if lib["user_api"] == "blas" and lib["filepath"].startswith(numpy_dir)
    ]


def test_blas_threads_are_pinned_for_the_call_and_restored():
    import faiss  # noqa: F401  - a second BLAS in the process must not confuse the pin

    before = _numpy_blas_thread_counts()
    assert before, "numpy's BLAS not found"
    with index_module._blas_threads(1):
        assert _numpy_blas_thread_counts() == [1] * len(before)
    assert _numpy_blas_thread_counts() == before


@pytest.fixture
def blas_pins(monkeypatch) -> list[int]:
    """The thread counts every ``score_rows`` call pinned BLAS to, in order."""
    real, seen = index_module._blas_threads, []

    def spy(n):
        seen.append(n)
        return real(n)

    monkeypatch.setattr(index_module, "_blas_threads", spy)
    return seen


def test_score_rows_is_the_matrix_vector_product_on_one_blas_thread(blas_pins):
    """A 1M-token document's shape (50K passages x 384): the same float32 numbers as numpy's own
    product on its default (multi-thread) BLAS."""
    rng = np.random.default_rng(5)
    vecs, q = _unit(rng, 50_000, 384), _unit(rng, 1, 384)[0]
    want = vecs @ q
    got = score_rows(vecs, q)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(score_rows(vecs, q.astype(np.float64)), want)  # the query takes the rows' dtype
    assert blas_pins == [1, 1]


def test_every_scan_of_the_vectors_runs_on_one_blas_thread(blas_pins):
    rng = np.random.default_rng(6)
    pages = np.repeat(np.arange(40), 2)
    vecs, q = _unit(rng, len(pages)), _unit(rng, 1)[0]
    HierarchicalIndex(vecs, pages).search_flat(q, 5)
    assert blas_pins == [1]
    hier = HierarchicalIndex(vecs, pages, flat_below_pages=0, section_pages=8, fanout=100.0)
    assert hier.search(q, 5)[0].sections_searched == 5 and blas_pins == [1] * 6  # one per section
    assert document_module.score_rows is score_rows  # DocumentIndex's passage scores
