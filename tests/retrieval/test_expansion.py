"""Contract-vocabulary expansion: plain questions gain the terms agreements use, others gain nothing."""

import numpy as np
import pytest

from agentctx.retrieval.expansion import CONCEPTS, expansion_terms


@pytest.mark.parametrize("question, must", [
    ("Can the vendor pass the contract on to a buyer of its business?", "assign"),
    ("What if the supplier is taken over by a competitor?", "change of control"),
    ("May we let our parent company use the software?", "affiliate"),
    ("Which country's courts decide a disagreement?", "dispute"),
    ("Which law applies if we disagree?", "governed by the laws of"),
    ("How much notice do we need to give to cancel the subscription?", "terminate"),
    ("Do we have to keep the price list secret?", "confidential"),
    ("What is the most the provider would have to pay us if the service fails?", "limitation of liability"),
    ("Does the contract keep going on its own after the first year?", "renewal"),
    ("What happens if an earthquake stops delivery?", "force majeure"),
])
def test_plain_questions_gain_terms_of_art(question, must):
    assert must in expansion_terms(question)


@pytest.mark.parametrize("question", [
    "Which port does the daemon listen on?",
    "What colour is the default theme?",
    "How many retries does the downloader make?",
])
def test_questions_without_a_contract_concept_gain_nothing(question):
    assert expansion_terms(question) == ""


def test_terms_are_deduplicated_in_concept_order():
    terms = expansion_terms("How much advance warning is needed to end the contract without any reason?").split()
    assert len(terms) == len(set(terms))
    names = [c.name for c in CONCEPTS if c.plain.search("end the contract without any reason, advance warning")]
    assert names == ["termination", "for_convenience", "notice_period"]


class _Unit:
    """A tiny deterministic embedder: a bag of hashed words, unit length (no model)."""

    dim = 64

    def _v(self, text):
        v = np.zeros(self.dim, np.float32)
        for w in text.lower().split():
            v[hash(w) % self.dim] += 1.0
        return v / max(float(np.linalg.norm(v)), 1e-12)

    def embed_query(self, q):
        return self._v(q)

    def embed_queries(self, qs):
        return np.stack([self._v(q) for q in qs])


def test_expanded_query_blends_unit_vectors_and_extends_the_lexical_query():
    from agentctx.retrieval.document import DocumentIndex

    idx = DocumentIndex.__new__(DocumentIndex)  # only the expansion step, no document needed
    idx.embedder, idx.expansion_weight = _Unit(), 0.5
    q = "What if the licensor is bought by another firm?"
    qv = idx.embedder.embed_query(q)
    lex, v = idx.expanded_query(q)
    assert lex == q + " change of control merger acquisition"
    want = qv + 0.5 * idx.embedder.embed_query("change of control merger acquisition")
    np.testing.assert_allclose(v, want / np.linalg.norm(want), rtol=1e-6)
    idx.expansion_weight = 0.0
    lex, v = idx.expanded_query(q)
    assert lex == q and np.array_equal(v, qv)


@pytest.mark.parametrize("question", [
    "Which command-line argument sets the output directory?",
    "Does the tool warn about deprecated flags?",
    "Where is the API secret stored?",
    "How do I transfer files to the server?",
    "What is the performance penalty of enabling checksums?",
    "Which files are shipped to users in the package?",
])
def test_technical_questions_with_contract_looking_words_gain_nothing(question):
    assert expansion_terms(question) == ""
