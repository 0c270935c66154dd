"""What a question is about: the clause kind it asks for and the case-file document it names."""

from __future__ import annotations

import pytest

from agentctx.agents.question_scope import question_document, question_kind
from agentctx.retrieval.documents import DocumentPart


@pytest.mark.parametrize("question,kind", [
    ("Who may assign the agreement?", "assignment"),
    ("Which law governs this contract?", "governing_law"),
    ("What is the governing law?", "governing_law"),
    ("Can either party terminate for convenience?", "termination"),
    ("When are invoices due?", "payment"),
    ("How much must the customer pay?", "payment"),
    ("Is the vendor's liability capped?", "liability_cap"),
    ("Who indemnifies whom?", "indemnity"),
    ("May the recipient disclose confidential information?", "confidentiality"),
    ("How long does the agreement last?", "term"),
    ("Who are the parties to the agreement?", "parties"),
    ("What does the sensor log record each hour?", None),
])
def test_question_kind(question, kind):
    assert question_kind(question) == kind


PARTS = (DocumentPart(0, "SUPPLY AGREEMENT", 0, 100, "opening"),
         DocumentPart(1, "other text", 100, 150, "other"),
         DocumentPart(2, "Amendment No. 1 to Supply Agreement", 150, 300, "opening"),
         DocumentPart(3, "design_partner.txt", 300, 400, "header"))


def test_question_document():
    assert question_document("Under the Supply Agreement, when is payment due?", PARTS).index == 0
    assert question_document("What does Amendment No. 1 change about payment?", PARTS).index == 2
    assert question_document("In the design partner agreement, who owns feedback?", PARTS).index == 3
    assert question_document("When is payment due?", PARTS) is None
    assert question_document("Under the Supply Agreement?", PARTS[:1]) is None  # one document: nothing to pick
