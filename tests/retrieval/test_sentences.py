"""retrieval.sentences on real layouts: hard wraps, clause numbers, headings, abbreviations."""

from __future__ import annotations

import re
from pathlib import Path

from agentctx.retrieval.sentences import blocks, is_heading_line, sentences

DEVSET = Path(__file__).resolve().parents[2] / "bench" / "devsets" / "contracts"


def _texts(text: str, spans) -> list[str]:
    return [" ".join(text[a:b].split()) for a, b in spans]


def test_hard_wrapped_sentence_is_one_sentence():
    # GPL-3 style: a sentence wrapped over three lines, then the next sentence.
    text = (
        "You may not propagate or modify a covered work except as expressly\n"
        "provided under this License.  Any attempt otherwise to propagate or\n"
        "modify it is void, and will automatically terminate your rights under\n"
        "this License (including any patent licenses granted under the third\n"
        "paragraph of section 11).\n"
    )
    got = _texts(text, sentences(text))
    assert got == [
        "You may not propagate or modify a covered work except as expressly provided under this License.",
        "Any attempt otherwise to propagate or modify it is void, and will automatically terminate your "
        "rights under this License (including any patent licenses granted under the third paragraph of "
        "section 11).",
    ]


def test_numbered_items_and_headings_are_blocks():
    text = (
        "ARTICLE 12. GOVERNING LAW\n"
        "12.1 This Agreement is governed by the laws of the State of New York. It excludes\n"
        "the conflict of laws rules.\n"
        "(a) Each party submits to the courts of New York County.\n"
        "(b) Nothing limits injunctive relief.\n\n"
        "8.1 Liability Caps. Neither party's liability exceeds the fees paid.\n"
    )
    bl = blocks(text)
    got = [(" ".join(text[b.start:b.end].split()), b.heading) for b in bl]
    assert got == [
        ("ARTICLE 12. GOVERNING LAW", True),
        ("12.1 This Agreement is governed by the laws of the State of New York. It excludes the conflict "
         "of laws rules.", False),
        ("(a) Each party submits to the courts of New York County.", False),
        ("(b) Nothing limits injunctive relief.", False),
        ("8.1 Liability Caps. Neither party's liability exceeds the fees paid.", False),
    ]
    # The clause number "12.1" is not a sentence of its own; "8.1 Liability Caps." is kept whole.
    s = _texts(text, sentences(text))
    assert s[1] == "12.1 This Agreement is governed by the laws of the State of New York."
    assert s[2] == "It excludes the conflict of laws rules."
    assert "8.1 Liability Caps." in s


def test_abbreviations_and_initials_do_not_split():
    text = "Acme Inc. and J. Smith agree, e.g. on the U.S. market, to pay No. 5 fees. Then it ends."
    assert _texts(text, sentences(text)) == [
        "Acme Inc. and J. Smith agree, e.g. on the U.S. market, to pay No. 5 fees.",
        "Then it ends.",
    ]


def test_heading_lines():
    for line in ["7. Assignment", "LIMITATION OF LIABILITY", "## Termination", "ARTICLE 12.", "Section 4.2."]:
        assert is_heading_line(line), line
    for line in ["the Licensee shall pay within 30 days.", "Neither party may assign this Agreement.",
                 "", "1.", "and the Licensee, and the Licensor agree that the following terms apply to it"]:
        assert not is_heading_line(line), line


def test_spans_are_verbatim_and_ordered_on_real_documents():
    for name in ["gpl_3_0.txt", "cc_by_4_0.txt", "nvidia_tensorrt_sla.txt", "python_cwi_license.txt"]:
        text = (DEVSET / name).read_text()
        spans = sentences(text, max_chars=1 << 30)  # real boundaries only, no length cuts
        assert spans, name
        prev = 0
        for a, b in spans:
            assert prev <= a < b <= len(text)
            assert not text[a].isspace() and not text[b - 1].isspace()
            prev = b
        # Hard wrap: a sentence of a wrapped licence does not end at a bare line break mid-clause,
        # so (list items "a) ..." aside) almost no sentence starts with a lower-case word.
        mid = [a for a, _ in spans if text[a].islower() and not re.match(r"[a-z]{1,4}[.)]\s", text[a:a + 6])]
        assert len(mid) <= 0.02 * len(spans), (name, [text[a:a + 40] for a in mid])


def test_long_sentence_is_cut_at_clause_punctuation():
    text = "The Licensee shall " + "; ".join(f"do thing number {i} with care" for i in range(60)) + "."
    spans = sentences(text, max_chars=300)
    assert len(spans) > 1
    assert all(b - a <= 300 for a, b in spans)
    assert min(b - a for a, b in spans) >= 100  # about equal pieces, no tiny tail
    assert text[spans[0][0]:spans[0][1]].startswith("The Licensee shall do thing number 0")
