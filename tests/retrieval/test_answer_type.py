"""retrieval.answer_type on hand-written questions and clauses (none taken from the dev set)."""

from __future__ import annotations

import pytest

from agentctx.retrieval.answer_type import ANSWER_TYPES, passage_types, question_types, type_mask


@pytest.mark.parametrize("question, expected", [
    ("How long do we have to cure a breach?", {"duration", "date"}),
    ("How much notice must the landlord give?", {"duration", "date"}),
    ("How much is the monthly rent?", {"money", "percent", "count"}),
    ("What does it cost to renew?", {"money", "percent", "count"}),
    ("When does the warranty start?", {"date", "duration"}),
    ("Who owns the improvements?", {"name"}),
    ("Which courts hear disputes?", {"name"}),
    ("Where is the data stored?", {"name", "identifier"}),
    ("Which option turns off colour?", {"identifier", "count"}),
    ("How many users may install it?", {"count", "money", "percent", "duration"}),
    ("What rate applies to overdue sums?", {"percent", "money"}),
    # yes/no and open questions expect no typed value
    ("Can the tenant sublet the flat?", set()),
    ("What happens to the licence when the company is sold?", set()),  # "when" as a conjunction
    ("Why was the clause added?", set()),
])
def test_question_types(question, expected):
    assert question_types(question) == expected


@pytest.mark.parametrize("text, present, absent", [
    ("Rent of EUR 1,200 is due monthly.", {"money", "count"}, {"duration", "date"}),
    ("The fee is $40.", {"money"}, {"percent"}),
    ("Either party may terminate on ninety (90) days' notice.", {"duration", "count"}, {"money"}),
    ("This licence expires on 31 March 2031.", {"date"}, {"money"}),
    ("Interest accrues at 1.5 percent per month.", {"percent"}, {"money", "duration"}),
    ("Settings are read from /etc/tool/config or $TOOL_HOME.", {"identifier"}, {"money"}),
    ("Use --no-color to turn it off.", {"identifier"}, {"date"}),
    ("disputes go to the courts of the Canton of Geneva.", {"name"}, {"money", "duration"}),
    ("The Licensee shall keep the Software confidential.", set(), {"money", "duration", "date", "percent", "name"}),
])
def test_passage_types(text, present, absent):
    got = passage_types(text)
    assert present <= got, got
    assert not (absent & got), got


def test_type_mask_is_a_bit_set():
    assert type_mask(frozenset()) == 0
    m = type_mask(frozenset({"money", "name"}))
    assert m == (1 << ANSWER_TYPES.index("money")) | (1 << ANSWER_TYPES.index("name"))
    assert m & type_mask(passage_types("pay USD 5")) and not m & type_mask(passage_types("within 5 days"))
