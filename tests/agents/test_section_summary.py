"""Extractive section summaries: whole obligation sentences of the section, never its heading or number."""

from __future__ import annotations

from pathlib import Path

from agentctx.agents.section_summary import key_sentences, summary_sections
from agentctx.retrieval.structure import parse_structure

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "agentctx" / "samples" / "sample_contract.txt"
GUROBI = ROOT / "bench" / "devsets" / "contracts" / "gurobi_eval_eula.txt"


def test_one_summary_per_article_of_the_sample_and_never_a_heading_or_number():
    text = SAMPLE.read_text()
    st = parse_structure(text)
    parts = summary_sections(st)
    names = [p[0] for p in parts]
    assert names[0] == "Preamble" and names[1] == "ARTICLE 1. THE PARTIES AND RECITALS"
    assert "ARTICLE 47. LIMITS ON LIABILITY" in names
    assert not any(n.startswith("SCHEDULE") for n in names)  # a schedule is summarised by its articles
    # The signature block is a part of its own (who signed for whom), not the end of article 47.
    assert names[-1] == "Signatures" and len(parts) == 1 + 47 + 1
    for name, start, end, _ in parts:
        spans = key_sentences(st, start, end)
        assert 1 <= len(spans) <= 2, name
        for a, b in spans:
            s = " ".join(text[a:b].split())
            assert start <= a < b <= end
            assert not s[0].isdigit() and not s.startswith("ARTICLE") and s.endswith("."), (name, s)


def test_the_obligation_is_chosen_over_background():
    text = ("ARTICLE 9. CONFIDENTIALITY\n"
            "9.1 This Article applies to information exchanged under it.\n"
            "9.2 The receiving Party shall keep the disclosing Party's Confidential Information secret.\n"
            "9.3 Confidential Information is information marked as confidential.\n")
    st = parse_structure(text)
    (name, start, end, _), = summary_sections(st)
    got = [" ".join(text[a:b].split()) for a, b in key_sentences(st, start, end, max_sentences=1)]
    assert got == ["The receiving Party shall keep the disclosing Party's Confidential Information secret."]


def test_titled_items_are_summarised_one_by_one():
    st = parse_structure(GUROBI.read_text())
    names = [p[0] for p in summary_sections(st)]
    assert "7.1. Assignment" in names and "7.5. Governing Law" in names and "7. GENERAL" not in names
