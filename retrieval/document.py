"""One document made searchable: passages -> dense vectors + BM25 -> page ranking.

This is the object a serving process keeps per loaded document. It is built
from the text and the LLM tokenizer's offset mapping (the same tokenization
that produced the KV pages), and answers ``retrieve(query, k)`` with ranked
page indices.

How a page is ranked (``method``):

* ``"dense"``: every passage (one sentence by default, :mod:`.passages`) is
  embedded with MiniLM; a page scores the best cosine of the passages that
  touch it (max pooling, so one sentence about assignment is not drowned by
  the rest of its page).
* ``"lexical"``: BM25 over the same passages, max pooled per page.
* ``"hybrid"`` (default): per passage, the cosine plus two small bonuses:
  ``lexical_weight`` x its BM25 score relative to the best passage's, and
  ``answer_type_weight`` when it holds a value of the kind the question asks
  for (:mod:`.answer_type`: a duration for "how long", an amount for "how
  much", a name for "who"); then max pooling. Paraphrased questions
  ("Can the licensee hand the licence to someone else?") need the dense
  side; rare exact words (a statute, "escrow") the lexical one.

Two corrections to plain cosine in ``hybrid``: a caption (a heading line, or
a passage of fewer than ``caption_words`` words) scores ``caption_penalty``
less, because short texts reach high cosines with a short question while
holding no answer (a title page outranked the sentence under it); and a long
sentence scores the best of its own cosine and its clause windows'
(:mod:`.passages`), so one clause of a dozen-item grant can carry it.

On the real-text dev set, reciprocal rank fusion of the dense and BM25 page
rankings lost recall against dense alone (BM25 is weak on paraphrases and
RRF gives it an equal vote); the additive bonuses keep the dense order and
move pages only between near ties. BENCHMARKS.md §5 has the figures.

Each returned page carries its evidence: the passage that scored best for the
query (a char span), so a plan can show why a page was read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from .answer_type import passage_types, question_types, type_mask
from .chunking import Chunk, build_chunks
from .embedding import Embedder
from .expansion import expansion_terms
from .fusion import top_pages
from .hierarchical import RetrieveResult
from .index import score_rows
from .lexical import LexicalIndex
from .passages import PassageSet, build_passages

__all__ = ["DocumentIndex", "BuildStats", "PageRetriever", "Method", "METHODS"]

Method = Literal["hybrid", "dense", "lexical"]
METHODS: tuple[str, ...] = ("hybrid", "dense", "lexical")


@runtime_checkable
class PageRetriever(Protocol):
    """Anything that ranks a document's pages for a text query."""

    num_pages: int

    def retrieve(self, query: str, k: int, *, method: Method = "hybrid") -> RetrieveResult: ...


@dataclass(frozen=True)
class BuildStats:
    """Wall time of each build stage, in seconds, and sizes."""

    num_pages: int
    num_passages: int
    num_tokens: int
    chunk_seconds: float
    lexical_seconds: float
    embed_seconds: float
    index_seconds: float
    texts_encoded: int
    num_windows: int = 0  # clause windows of long sentences, embedded beside the passages

    @property
    def total_seconds(self) -> float:
        return self.chunk_seconds + self.lexical_seconds + self.embed_seconds + self.index_seconds


class DocumentIndex:
    """Page retrieval for one tokenized document.

    Args:
        text: the document.
        offsets: tokenizer offset mapping, ``(num_tokens,)`` pairs of chars.
        page_size: tokens per page (``P``).
        embedder: shared :class:`Embedder` (a new one with the default cache if ``None``).
        max_words: passage length limit (whole sentences up to this many words; 1 = one
            sentence per passage).
        heading_context: prefix each passage with its section heading before embedding.
            Off by default: a planted or misfiled sentence inherits a misleading heading
            (it cost recall on the dev set); headings are still passages of their own.
        lexical_weight: hybrid bonus for the passage's BM25 score (relative to the best).
        answer_type_weight: hybrid bonus for holding a value of the expected answer type.
        expansion_weight: weight of the contract-vocabulary expansion (:mod:`.expansion`): its
            terms' embedding is added to the question's with this weight, and the terms join
            the lexical query; 0 turns expansion off.
        caption_penalty: hybrid: subtracted from a heading's or a short passage's score, so a
            caption does not outrank the content it heads.
        caption_words: passages of fewer words count as captions.
        clause_words: sentences of more words are also scored by their clause windows
            (:func:`.passages.clause_windows`; 0: off).
        clause_weight: hybrid: a long sentence's cosine moves this share of the way up to its best
            window's, when that is higher (1: the window's cosine replaces it).
    """

    def __init__(
        self,
        text: str,
        offsets: Sequence[tuple[int, int]],
        *,
        page_size: int = 256,
        embedder: Embedder | None = None,
        max_words: int = 1,
        heading_context: bool = False,
        lexical_weight: float = 0.05,
        answer_type_weight: float = 0.06,
        expansion_weight: float = 0.5,
        caption_penalty: float = 0.1,
        caption_words: int = 6,
        clause_words: int = 30,
        clause_weight: float = 0.35,
    ) -> None:
        if len(offsets) == 0:
            raise ValueError("cannot index a document with no tokens")
        self.embedder = embedder or Embedder()
        self.page_size = page_size
        self.lexical_weight = lexical_weight
        self.answer_type_weight = answer_type_weight
        self.expansion_weight = expansion_weight
        self.caption_penalty = caption_penalty
        self.clause_weight = clause_weight
        self.text = text
        t0 = time.perf_counter()
        self.chunks: list[Chunk] = build_chunks(text, offsets, page_size)
        self.passages: PassageSet = build_passages(text, offsets, page_size, max_words=max_words,
                                                   clause_words=clause_words)
        texts = self.passages.texts(text, with_heading=heading_context)
        words = self.passages.words(text)
        self._caption = np.fromiter((p.is_heading for p in self.passages.passages), dtype=bool,
                                    count=len(texts)) | (words < caption_words)
        window_texts = self.passages.window_texts(text)
        self._passage_starts = np.fromiter((p.char_start for p in self.passages.passages), dtype=np.int64,
                                           count=len(texts))
        self._passage_ends = np.fromiter((p.char_end for p in self.passages.passages), dtype=np.int64,
                                         count=len(texts))
        self._types = np.fromiter(
            (type_mask(passage_types(text[p.char_start : p.char_end])) for p in self.passages.passages),
            dtype=np.int64, count=len(self.passages.passages))
        t1 = time.perf_counter()
        self.lexical = LexicalIndex(texts)
        t2 = time.perf_counter()
        before = self.embedder.texts_encoded
        vectors = self.embedder.embed(texts + window_texts)  # one call: windows batch with sentences
        self._vectors = vectors[: len(texts)]  # (n_passages, dim)
        self._window_vectors = vectors[len(texts):]  # (n_windows, dim)
        t3 = time.perf_counter()
        # Rows of each page in the passage set's (passage, page) pairs, for the evidence lookup.
        self._page_rows = np.searchsorted(self.passages.row_page, np.arange(self.passages.num_pages + 1))
        t4 = time.perf_counter()
        self.num_tokens = len(offsets)
        self.num_pages = len(self.chunks)
        self.stats = BuildStats(
            num_pages=self.num_pages,
            num_passages=len(texts),
            num_tokens=self.num_tokens,
            chunk_seconds=t1 - t0,
            lexical_seconds=t2 - t1,
            embed_seconds=t3 - t2,
            index_seconds=t4 - t3,
            texts_encoded=self.embedder.texts_encoded - before,
            num_windows=len(window_texts),
        )

    @property
    def last_page_len(self) -> int:
        """Tokens in the last page (1..P)."""
        return self.num_tokens - (self.num_pages - 1) * self.page_size

    def span_pages(self, char_start: int, char_end: int) -> range:
        """Pages whose chars meet ``[char_start, char_end)``."""
        starts = [c.char_start for c in self.chunks]
        lo = max(0, int(np.searchsorted(starts, char_start, side="right")) - 1)
        hi = max(lo, int(np.searchsorted(starts, max(char_start, char_end - 1), side="right")) - 1)
        return range(lo, hi + 1)

    # ---------------------------------------------------------------- scoring
    def expanded_query(self, query: str) -> tuple[str, np.ndarray]:
        """The lexical query and the unit query vector: the question's, with the expansion's terms
        added to the text and their embedding blended in (question and terms each embedded alone,
        :meth:`.Embedder.embed_queries`, so the question's vector is the same with or without them)."""
        terms = expansion_terms(query) if self.expansion_weight else ""
        if not terms:
            return query, self.embedder.embed_query(query)
        qv, tv = self.embedder.embed_queries([query, terms])
        v = qv + self.expansion_weight * tv
        return f"{query} {terms}", (v / max(float(np.linalg.norm(v)), 1e-12)).astype(qv.dtype)

    def passage_scores(self, query: str, qv: np.ndarray, question: str | None = None) -> np.ndarray:
        """``(num_passages,)`` hybrid score: cosine + lexical and answer-type bonuses (``query``
        and ``qv`` already expanded). The expected answer type is read from ``question``, the
        question as asked (default ``query``): appended expansion terms are no question."""
        s = score_rows(self._vectors, qv)
        if len(self._window_vectors) and self.clause_weight:
            best = np.array(s, copy=True)
            np.maximum.at(best, self.passages.window_passage, score_rows(self._window_vectors, qv))
            s = s + self.clause_weight * (best - s)
        if self.caption_penalty:
            s = s - self.caption_penalty * self._caption
        if self.lexical_weight:
            lex = self.lexical.scores(query)
            top = float(lex.max()) if len(lex) else 0.0
            if top > 0:
                s = s + self.lexical_weight / top * lex
        want = type_mask(question_types(query if question is None else question))
        if want and self.answer_type_weight:
            s = s + self.answer_type_weight * ((self._types & want) != 0)
        return s

    def _evidence(self, pages: np.ndarray, passage_scores: np.ndarray) -> tuple[tuple[int, int], ...]:
        """For each page, the char span of its best-scoring passage."""
        ps, out = self.passages, []
        for p in pages.tolist():
            lo, hi = self._page_rows[p], self._page_rows[p + 1]
            if hi <= lo:  # a page of whitespace only: no passage, the page itself
                c = self.chunks[p]
                out.append((c.char_start, c.char_end))
                continue
            rows = ps.row_passage[lo:hi]
            best = ps.passages[int(rows[int(np.argmax(passage_scores[rows]))])]
            out.append((best.char_start, best.char_end))
        return tuple(out)

    def retrieve(self, query: str, k: int, *, method: Method = "hybrid",
                 scope: tuple[int, int] | None = None) -> RetrieveResult:
        """Top-``k`` pages for ``query``, each with its evidence; timing covers embedding and search.

        ``scope``: a char range; only passages that meet it are scored, so a page outside it is
        never returned (a page on its edge is ranked by its passages inside).

        Scoring is exact: every passage of the document is scored. For 1M tokens (~45K
        passages) the cosine scan is one (45K x 384) matrix-vector product, ~5 ms on one BLAS
        thread (:func:`.index.score_rows`); an approximate index would save nothing and lose recall.
        """
        if not query or not query.strip():
            raise ValueError("query is empty")
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        k = max(0, min(int(k), self.num_pages))
        t0 = time.perf_counter()
        # "dense" stays the plain cosine ablation; the product's hybrid method expands.
        if method == "dense":
            lex_query, qv = query, self.embedder.embed_query(query)
        else:
            lex_query, qv = self.expanded_query(query)
        t1 = time.perf_counter()
        if method == "lexical":
            scores = self.lexical.scores(lex_query)
        else:
            scores = score_rows(self._vectors, qv) if method == "dense" else self.passage_scores(lex_query, qv, query)
        if scope is not None:
            outside = (self._passage_ends <= scope[0]) | (self._passage_starts >= scope[1])
            scores = np.where(outside, -np.inf, scores)
        page_scores = self.passages.page_max(scores)
        if method == "lexical":
            page_scores[page_scores <= 0] = -np.inf  # no query term: no evidence
        pages = top_pages(page_scores, k)
        evidence = self._evidence(pages, scores)
        return RetrieveResult(pages, page_scores[pages].astype(np.float32), "flat", time.perf_counter() - t1,
                              t1 - t0, method=method, evidence=evidence)

