"""Prompt-level mode (pure functions, no vLLM): plan -> prompt tokens, copy choices."""

import pytest

from agentctx.serving.prompt_mode import assemble_prompt, copy_choices, page_runs


def _marker(page: int) -> list[int]:
    return [-1, page]  # distinguishable from document ids


def test_dense_and_all_pages_give_the_full_document():
    doc = list(range(1000, 1010))  # 10 tokens, page 4 -> pages 0..2 (last ragged)
    dense = assemble_prompt(doc, 4, None, [7, 8], _marker)
    full = assemble_prompt(doc, 4, [2, 0, 1, 1], [7, 8], _marker)
    assert dense.token_ids == doc + [7, 8] == full.token_ids
    assert dense.doc_tokens == full.doc_tokens == 10
    assert full.runs == ((0, 2),)


def test_selected_pages_in_document_order_with_markers_after_gaps():
    doc = list(range(100, 120))  # 20 tokens, page 4 -> 5 pages
    plan = assemble_prompt(doc, 4, [4, 0, 2], [9], _marker)
    assert plan.token_ids == [100, 101, 102, 103, -1, 2, 108, 109, 110, 111, -1, 4, 116, 117, 118, 119, 9]
    assert plan.doc_tokens == 12
    assert plan.runs == ((0, 0), (2, 2), (4, 4))
    # a run not starting at page 0 gets a marker too
    assert assemble_prompt(doc, 4, [3, 4], [], _marker).token_ids[:2] == [-1, 3]


def test_bad_page_selections_are_rejected():
    doc = list(range(10))
    with pytest.raises(ValueError, match="out of range"):
        assemble_prompt(doc, 4, [3], [], _marker)
    with pytest.raises(ValueError, match="out of range"):
        assemble_prompt(doc, 4, [-1], [], _marker)
    with pytest.raises(ValueError, match="no pages"):
        assemble_prompt(doc, 4, [], [], _marker)


def test_page_runs():
    assert page_runs([0, 1, 2, 5, 7, 8]) == [(0, 2), (5, 5), (7, 8)]
    assert page_runs([]) == []


def test_copy_choices_are_verbatim_sentences_in_order():
    text = ("1. The Supplier shall deliver the goods within thirty days. Payment is due in 45 days.\n"
            "Short.\nThe Customer may terminate this Agreement on notice; damages are capped at fees paid.")
    choices = copy_choices([text, text])
    # clause numbers and short fragments are not quotes; a ';' before lower case does not split
    assert choices == ["The Supplier shall deliver the goods within thirty days.",
                       "Payment is due in 45 days.",
                       "The Customer may terminate this Agreement on notice; damages are capped at fees paid."]
    assert all(c in text for c in choices)
    assert len(copy_choices([text], max_choices=2)) == 2
