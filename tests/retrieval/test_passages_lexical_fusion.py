"""Passages (page mapping, max pooling), BM25 scoring and rank fusion on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from agentctx.retrieval.fusion import reciprocal_rank_fusion, rrf_scores, top_pages
from agentctx.retrieval.lexical import LexicalIndex
from agentctx.retrieval.passages import build_passages


def _char_offsets(text: str) -> list[tuple[int, int]]:
    """One token per character: pages of P characters, easy to reason about."""
    return [(i, i + 1) for i in range(len(text))]


def test_passages_map_to_pages_and_cross_boundaries():
    text = (
        "ASSIGNMENT\n"                                    # heading, chars 0-10
        "Neither party may assign this Agreement. "      # 11-51
        "Consent shall not be unreasonably withheld.\n"  # 52-95
        "\n"
        "Fees are due in thirty days."                    # 97-124
    )
    ps = build_passages(text, _char_offsets(text), page_size=40, max_words=6)
    got = [(" ".join(text[p.char_start:p.char_end].split()), p.first_page, p.last_page, p.heading)
           for p in ps.passages]
    assert got == [
        ("ASSIGNMENT", 0, 0, "ASSIGNMENT"),
        ("Neither party may assign this Agreement.", 0, 1, "ASSIGNMENT"),   # chars 11-50 cross page 0/1
        ("Consent shall not be unreasonably withheld.", 1, 2, "ASSIGNMENT"),
        ("Fees are due in thirty days.", 2, 3, "ASSIGNMENT"),
    ]
    assert ps.num_pages == 4
    # rows: one per (passage, page), sorted by page
    assert ps.row_page.tolist() == [0, 0, 1, 1, 2, 2, 3]
    assert ps.row_passage.tolist() == [0, 1, 1, 2, 2, 3, 3]
    # max pooling: a page takes the best passage that touches it
    assert ps.page_max(np.array([0.1, 0.9, 0.2, 0.5])).tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])
    texts = ps.texts(text)
    assert texts[0] == "ASSIGNMENT" and texts[1] == "ASSIGNMENT: Neither party may assign this Agreement."
    assert ps.texts(text, with_heading=False)[1] == "Neither party may assign this Agreement."


def test_passage_groups_whole_sentences_up_to_the_word_limit():
    text = "One two three. Four five six. Seven eight nine ten eleven twelve thirteen."
    ps = build_passages(text, _char_offsets(text), page_size=1000, max_words=6)
    assert [text[p.char_start:p.char_end] for p in ps.passages] == [
        "One two three. Four five six.",
        "Seven eight nine ten eleven twelve thirteen.",  # longer than the limit: alone, never cut mid-sentence
    ]


def test_bm25_ranks_rare_term_and_stems():
    texts = [
        "The Licensee shall pay the fees within thirty days.",
        "Neither party may assign this Agreement without consent.",
        "The source code is deposited with an escrow agent.",
        "",
    ]
    lex = LexicalIndex(texts)
    s = lex.scores("Who holds the escrow copy?")
    assert int(np.argmax(s)) == 2 and s[0] == 0 and s[1] == 0
    s = lex.scores("assigning the agreement")  # "assigning" stems to "assign"
    assert int(np.argmax(s)) == 1
    assert "assign" in lex.query_terms("assigning")
    assert lex.scores("the and of").tolist() == [0, 0, 0, 0]  # stop words only
    assert lex.scores("zyzzyva").tolist() == [0, 0, 0, 0]  # unknown word


def test_rrf_hand_computed_and_deterministic():
    pages, scores = rrf_scores([[1, 2, 3], [3, 2, 1]], k=60)
    assert pages == [1, 3, 2]  # 1 and 3 tie (1/61 + 1/63); first appearance wins
    assert scores == pytest.approx([1 / 61 + 1 / 63, 1 / 61 + 1 / 63, 2 / 62])
    assert reciprocal_rank_fusion([[5, 1, 2], [1, 9, 5]]) == [1, 5, 9, 2]
    assert reciprocal_rank_fusion([[4, 3]], weights=[2.0]) == [4, 3]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[1]], weights=[1.0, 2.0])
    again = [reciprocal_rank_fusion([[7, 8, 9], [9, 8, 7], [8]]) for _ in range(3)]
    assert again[0] == again[1] == again[2] == [8, 7, 9]


def test_top_pages_drops_pages_without_evidence_and_breaks_ties_by_page():
    s = np.array([0.5, -np.inf, 0.9, 0.5, 0.1])
    assert top_pages(s, 10).tolist() == [2, 0, 3, 4]
    assert top_pages(s, 2).tolist() == [2, 0]
    assert top_pages(np.full(3, -np.inf), 2).tolist() == []
