"""End to end on real text: contract generator -> tokenizer -> pages -> MiniLM -> plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentctx.retrieval import DocumentIndex, Embedder, SelectionPolicy, plan
from tests.fixtures.contracts import CLAUSE_TAXONOMY, generate_contract


@pytest.fixture(scope="module")
def small_doc(wordpiece_tokenizer):
    doc = generate_contract(5200, num_needles=3, seed=11, tokenizer=wordpiece_tokenizer)
    enc = wordpiece_tokenizer(doc.text, return_offsets_mapping=True, add_special_tokens=True)
    return doc, enc["offset_mapping"]


def test_generator_ground_truth(small_doc):
    doc, _ = small_doc
    assert len(doc.needles) == 3
    for n in doc.needles:
        assert doc.text[n.char_start : n.char_end] == n.fact_text
        assert n.value in n.fact_text and n.entity in n.question
    assert doc.clauses and all(c.kind in CLAUSE_TAXONOMY for c in doc.clauses)
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in doc.clauses)
    again = generate_contract(5200, num_needles=3, seed=11, tokenizer=None)
    assert again.text == generate_contract(5200, num_needles=3, seed=11).text  # seeded
    assert abs(len(again.text) / 4 - 5200) < 600


def test_needle_page_is_found(small_doc, embedder):
    doc, offsets = small_doc
    d = DocumentIndex(doc.text, offsets, embedder=embedder, page_size=256)
    assert 17 <= d.num_pages <= 25
    assert "".join(c.text for c in d.chunks) == doc.text
    for n in doc.needles:
        pages = {c.page_index for c in d.chunks if c.char_start < n.char_end and c.char_end > n.char_start}
        res = d.retrieve(n.question, 3)
        assert pages & set(res.pages.tolist()), (n.question, pages, res.pages)
        p = plan(n.question, d, d.num_pages, d.last_page_len, SelectionPolicy(top_k_pages=3, neighbor_pages=1))
        assert pages <= set(p.pages)
        assert p.retrieval is not None and p.retrieval.embed_seconds >= 0


def test_reload_embeds_nothing(small_doc, embed_cache):
    doc, offsets = small_doc
    d = DocumentIndex(doc.text, offsets, embedder=Embedder(cache_dir=embed_cache))
    d2 = DocumentIndex(doc.text, offsets, embedder=Embedder(cache_dir=embed_cache))
    assert d.stats.num_passages == len(d.passages.passages) > d.num_pages
    assert d2.stats.texts_encoded == 0
    with pytest.raises(ValueError):
        d.retrieve("  ", 3)
    with pytest.raises(ValueError, match="method"):
        d.retrieve("fee", 3, method="magic")  # type: ignore[arg-type]


REAL = Path(__file__).resolve().parents[2] / "bench" / "devsets" / "contracts"


@pytest.mark.parametrize("method", ["hybrid", "dense", "lexical"])
def test_each_method_finds_the_clause_in_a_real_licence(method, wordpiece_tokenizer, embedder):
    """MPL 2.0 (real text): the page of the jurisdiction clause is in the top 2, with its evidence."""
    text = (REAL / "mpl_2_0.txt").read_text()
    enc = wordpiece_tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    d = DocumentIndex(text, enc["offset_mapping"], embedder=embedder, page_size=256)
    fact = text.index("Any litigation relating to this License may be brought only in the")
    want = {c.page_index for c in d.chunks if c.char_start <= fact < c.char_end}
    res = d.retrieve("In which courts can a lawsuit about the License be brought?", 2, method=method)
    assert res.method == method and len(res.pages) == len(res.evidence) == 2
    assert want & set(res.pages.tolist()[:2]), (method, want, res.pages)
    # The evidence of that page is the litigation sentence's passage.
    a, b = res.evidence[res.pages.tolist().index(next(iter(want & set(res.pages.tolist()))))]
    assert a <= fact < b, text[a:b]


def test_hybrid_score_is_cosine_plus_the_two_bonuses(wordpiece_tokenizer, embedder):
    """Hand-checked: hybrid = cosine + w_lex * bm25 / max(bm25) + w_type * [holds the asked type]."""
    text = ("The Licensee shall pay the invoice within thirty (30) days. "
            "Payment terms are described in the order form. "
            "The parties shall act in good faith.")
    enc = wordpiece_tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    d = DocumentIndex(text, enc["offset_mapping"], embedder=embedder, page_size=8,
                      lexical_weight=0.1, answer_type_weight=0.2)
    q = "How long does the licensee have to pay?"
    qv = embedder.embed_query(q)
    cos = d._vectors @ qv
    bm = d.lexical.scores(q)
    typed = [1.0, 0.0, 0.0]  # only the first sentence holds a duration
    want = cos + 0.1 * bm / bm.max() + 0.2 * np.array(typed)
    assert np.allclose(d.passage_scores(q, qv), want, atol=1e-6)
    plain = DocumentIndex(text, enc["offset_mapping"], embedder=embedder, page_size=8,
                          lexical_weight=0.0, answer_type_weight=0.0)
    assert np.allclose(plain.passage_scores(q, qv), cos, atol=1e-6)
    # The answer type comes from the question as asked, not from text appended to it.
    untyped, appended = "The licensee pays", "The licensee pays and how long"
    lex = d.lexical.scores(appended)
    assert np.allclose(d.passage_scores(appended, qv, question=untyped), cos + 0.1 * lex / lex.max(), atol=1e-6)
    assert not np.allclose(d.passage_scores(appended, qv), cos + 0.1 * lex / lex.max(), atol=1e-6)
    # the dense method ranks by cosine alone; hybrid moves the typed sentence's page first
    assert d.retrieve(q, 1).evidence[0] == (0, text.index("Payment") - 1)
