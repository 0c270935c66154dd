"""The operative sentence in a software company's click-through forms (a subscription agreement, a free programme
agreement): a duty not to divulge set as a lead-in and its items, a duty to pay beside its denial, and a cap limited
to a sum in words after a clause number that opens with "WITH THE EXCEPTION OF". Short clauses written for these
tests; none is taken from a dev document or a published agreement. docs/REVIEW.md, "The operative sentence of each
kind".
"""

from __future__ import annotations

from agentctx.retrieval.structure import parse_structure
from tests.agents.cited import best_sentence as _best


def test_a_lead_in_that_agrees_with_items_not_to_divulge_is_the_duty():
    text = ("5. SECRECY\n"
            "5.1 Each side (the \"Holder\") may receive the other's trade data (\"Trade Data\"). Such Trade Data shall "
            "be either marked as secret or obviously secret by its nature.\n\n"
            "5.2 The Holder agrees: \n"
            "(i) not to divulge to any outsider any such Trade Data; \n"
            "(ii) to let only staff who need it see such Trade Data; and \n"
            "(iii) to guard such Trade Data as it guards its own.\n\n"
            "5.3 Section 5.2 does not apply to Trade Data that is public.\n")
    assert _best(text, "confidentiality").startswith("The Holder agrees: (i) not to divulge to any outsider")


def test_the_duty_to_pay_denied_is_not_the_payment_clause():
    text = ("2. PURPOSE\n"
            "2.1 Toolmaker grants the Club a right to use the Tool for teaching only.\n\n"
            "2.2 Provided that the Club's use of the Tool is in accordance with this Agreement, the Club shall not be "
            "obligated to pay for any such use of the Tool.\n\n"
            "2.3 Notwithstanding any other terms of this Agreement, in the event the Club uses the Tool for any other "
            "purpose, the Club shall be obligated to pay for such Tool in accordance with the Commercial Terms.\n")
    assert _best(text, "payment").startswith("Notwithstanding any other terms of this Agreement, in the event the Club")


def test_a_cap_limited_to_a_sum_in_words_is_the_cap_not_the_waiver():
    text = ("8. LIABILITY\n"
            "8.1 WITH THE EXCEPTION OF THE CLUB'S: (A) DUTIES UNDER SECTION 7, TO THE EXTENT PERMITTED BY LAW, IN NO "
            "EVENT SHALL EITHER SIDE BE LIABLE FOR LOST PROFITS OR FOR INDIRECT OR CONSEQUENTIAL DAMAGES.\n\n"
            "8.2 WITH THE EXCEPTION OF THE CLUB'S: (A) DUTIES UNDER SECTION 7, TO THE EXTENT PERMITTED BY LAW, THE "
            "TOTAL, CUMULATIVE LIABILITY OF EACH SIDE ARISING OUT OF OR RELATED TO THIS AGREEMENT OR THE TOOLS "
            "PROVIDED UNDER IT, WHETHER IN CONTRACT OR TORT, SHALL BE LIMITED TO TWO HUNDRED U.S. DOLLARS.\n")
    assert "SHALL BE LIMITED TO TWO HUNDRED U.S. DOLLARS" in _best(text, "liability_cap")


def test_a_sentence_opening_with_an_exception_after_a_clause_number_has_no_title():
    text = ("8. LIABILITY\n"
            "8.2 WITH THE EXCEPTION OF THE CLUB'S: (A) DUTIES UNDER SECTION 7, EACH SIDE'S LIABILITY IS LIMITED TO "
            "$200.\n")
    st = parse_structure(text)
    assert [s.name for s in st.sections] == ["8. LIABILITY", "8.2"]
