"""The rationale study's text classes (bench/risk_rationale.py): each class is reachable and exclusive."""

from __future__ import annotations

import pytest

from bench.risk_rationale import classify

CLAUSE = "The Supplier's total liability under this Agreement shall not exceed one hundred dollars."
LINE = "Risk review of this clause for the Customer, as JSON:"


@pytest.mark.parametrize(
    "text, want",
    [
        ("   ", "empty"),
        ("Risk review of this clause for the Customer, as JSON:", "echo"),
        ("total liability under this Agreement shall not exceed", "echo"),
        ("The Customer has no remedy if the Software does not work.", "example"),
        ("A cap of one hundred dollars leaves the Customer without a real remedy.", "on-topic"),
        ("The Customer is a high risk customer and the Supplier is a high risk supplier.", "off-topic"),
    ],
)
def test_classify(text, want):
    assert classify(text, CLAUSE, LINE) == want
