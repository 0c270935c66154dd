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


@pytest.mark.parametrize("question, wrong", [
    # words whose ordinary sense is broader than the concept they used to trigger
    ("How long must a manufacturer's promise to supply the program's sources remain open?", "warranty"),
    ("Did the author promise to publish the sources?", "warranty"),
    ("Is it guaranteed that the tool preserves timestamps?", "warranty"),
    ("Must a device maker hand over installation keys?", "assignment"),
    ("Is someone else allowed to run the program?", "assignment"),
    ("Do I lose my rights if I answer someone's lawsuit with a patent countersuit?", "indemnity"),
    ("Where can someone be sued over this license?", "indemnity"),
    ("Can I bring a lawsuit against the vendor?", "indemnity"),
    ("In case we get sued, how large an insurance policy must we hold?", "indemnity"),
    ("Do I have to buy a licence for each machine?", "change_of_control"),
    ("How do I merge two compressed files?", "change_of_control"),
    ("Can I acquire a copy without paying?", "change_of_control"),
    ("Who takes over support when the vendor stops?", "change_of_control"),
    ("What happens to end users of the licence?", "termination"),
    ("Does the warranty cover damages caused by misuse?", "insurance"),
    ("What state does the daemon enter after a crash?", "governing_law"),
    ("Which forum should I post bugs in?", "venue"),
    ("Does the file fall out of scope?", "dispute"),
    ("How do I keep my private key safe?", "confidentiality"),
    ("How much could compression save?", "liability_cap"),
    ("Do the logs roll over when they are full?", "renewal"),
    ("Does the download keep going after a network error?", "renewal"),
    ("Can I use the software abroad?", "export"),
    ("Which package does this file belong to?", "ownership"),
    ("Does the server survive a flood of requests?", "force_majeure"),
    ("Can I modify the software under this licence?", "amendment"),
    ("How long does it take to bring the server up?", "limitation_period"),
    ("Is there a bill of materials?", "payment_terms"),
])
def test_ordinary_senses_do_not_trigger_the_contract_concept(question, wrong):
    assert wrong not in [c.name for c in CONCEPTS if c.plain.search(question)]


@pytest.mark.parametrize("question, concept", [
    # ... while the contractual phrasing still does
    ("Can the licensee hand the licence to a sister company?", "assignment"),
    ("Can I give the subscription to my colleague?", "assignment"),
    ("What happens if the licensor merges with another company?", "change_of_control"),
    ("What if another company buys us?", "change_of_control"),
    ("What happens to the licence after a takeover?", "change_of_control"),
    ("Does the vendor promise that the software works?", "warranty"),
    ("Is the printer guaranteed to work for two years?", "warranty"),
    ("Who will defend us if a customer sues?", "indemnity"),
    ("Will the vendor cover our legal costs if we are sued?", "indemnity"),
    ("Who pays if we get sued by a customer?", "indemnity"),
    ("Which state's law governs the contract?", "governing_law"),
    ("Does the subscription roll over each year?", "renewal"),
    ("Can we ship the product overseas?", "export"),
    ("Who does the code belong to?", "ownership"),
    ("What happens if a strike stops delivery?", "force_majeure"),
    ("Can the vendor change the terms of the agreement?", "amendment"),
    ("How long do we have to bring a claim?", "limitation_period"),
])
def test_contract_phrasings_still_trigger(question, concept):
    assert concept in [c.name for c in CONCEPTS if c.plain.search(question)]


# The concepts every dev-set question triggers (all others trigger none). Changed when the
# triggers were narrowed to their contractual senses: L07 lost indemnity (it asks about an
# insurance policy; "get sued" alone is no indemnity); gpl3-offer-years lost warranty (a "promise
# to supply the sources" is an offer), gpl3-rom lost assignment ("hand over installation keys"),
# mpl-venue and mpl-countersuit lost indemnity (being sued, suing back).
DEV_CONCEPTS = {
    "L01": ("escrow", "source_code"), "L02": ("payment_terms",), "L03": ("late_payment",),
    "L04": ("change_of_control",), "L05": ("notice_period",), "L06": ("governing_law",), "L07": ("insurance",),
    "L13": ("renewal",), "L14": ("termination", "for_convenience", "notice_period"), "L16": ("assignment", "affiliate"),
    "D01": ("governing_law", "dispute"), "D08": ("liability_cap",), "D14": ("notice_period",), "D15": ("warranty",),
    "D16": ("change_of_control",),
    "gpl3-merger": ("change_of_control",), "apache-notice-informational": ("amendment",),
    "apache-support-liability": ("warranty",),  # "a paid guarantee on the software"
    "mpl-venue": ("governing_law",),
}


def test_dev_set_questions_trigger_only_their_concepts(dev_questions):
    assert len(dev_questions) == 48 + 41 and set(DEV_CONCEPTS) <= set(dev_questions)
    got = {i: tuple(c.name for c in CONCEPTS if c.plain.search(q)) for i, q in dev_questions.items()}
    assert {i: names for i, names in got.items() if names} == DEV_CONCEPTS
