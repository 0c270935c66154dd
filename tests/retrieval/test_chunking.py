from __future__ import annotations

import pytest

from agentctx.retrieval.chunking import build_chunks, num_pages_for, page_char_spans


def _check_cover(text, chunks, offsets, page_size):
    assert "".join(c.text for c in chunks) == text
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(text)
    for a, b in zip(chunks, chunks[1:]):
        assert a.char_end == b.char_start
        assert a.token_end == b.token_start
    assert len(chunks) == num_pages_for(len(offsets), page_size)
    assert chunks[-1].token_end == len(offsets)


@pytest.mark.parametrize("page_size", [1, 3, 16, 64, 10_000])
def test_spans_reconstruct_text_with_real_tokenizer(wordpiece_tokenizer, page_size):
    text = "  Leading spaces.\nThe Termination Fee is USD 3,417,902.\n\n  Naïve café — trailing  \n"
    enc = wordpiece_tokenizer(text, return_offsets_mapping=True)  # includes [CLS]/[SEP] at (0, 0)
    offsets = enc["offset_mapping"]
    assert offsets[0] == (0, 0) and offsets[-1] == (0, 0)
    chunks = build_chunks(text, offsets, page_size)
    _check_cover(text, chunks, offsets, page_size)
    for c in chunks:  # every real token's text lies inside its page's span
        for s, e in offsets[c.token_start : c.token_end]:
            if e > s:
                assert c.char_start <= s and e <= c.char_end


def test_special_only_pages_are_empty_and_contiguous():
    offsets = [(0, 0), (0, 3), (3, 8), (9, 12), (12, 12), (0, 0), (0, 0), (13, 20)]
    spans = page_char_spans(offsets, 2, text_len=22)
    assert spans == [(0, 3), (3, 13), (13, 13), (13, 22)]
    # Without the text length, the last page ends at the last token's end.
    assert page_char_spans(offsets, 3) == [(0, 9), (9, 13), (13, 20)]


def test_gaps_between_tokens_are_kept():
    text = "ab   cd\n\nef"
    offsets = [(0, 2), (5, 7), (9, 11)]
    chunks = build_chunks(text, offsets, 1)
    assert [c.text for c in chunks] == ["ab   ", "cd\n\n", "ef"]


def test_empty_and_bad_inputs():
    assert page_char_spans([], 4) == []
    with pytest.raises(ValueError):
        page_char_spans([(0, 1)], 0)
