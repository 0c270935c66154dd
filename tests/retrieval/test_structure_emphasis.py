"""Clause numbers inside Markdown emphasis ("**4.\tFees**."): standard forms published as Markdown bold their
article headings and leave the sub-clauses ("4.1.\tInvoices.") plain. Short texts written for these tests;
none is taken from a dev document. docs/REVIEW.md, "Structure first".
"""

from __future__ import annotations

from agentctx.retrieval.structure import parse_structure

TEXT = ("# Example Services Terms\n\n"
        "**1.\tScope**. These terms govern the services described in an order.\n\n"
        "**2.\tFees**.\n\n"
        "2.1.\tInvoices. The Client will pay each invoice within 30 days.\n\n"
        "2.2.\tTaxes. Fees exclude taxes.\n\n"
        "3.\tReporting.\n\n"
        "3.1.\tReports. The Vendor will report monthly.\n\n"
        "**4.\tTermination**.\n\n"
        "4.1.\tFor Cause. Either party may terminate these terms for material breach.\n")


def _paths(text: str) -> dict[str, list[str]]:
    st = parse_structure(text)
    return {s.name: [p.name for p in st.path(s.index)] for s in st.sections}


def test_a_bold_article_number_opens_a_top_level_section():
    st = parse_structure(TEXT)
    # under the document's Markdown title "# Example Services Terms"
    tops = [s for s in st.sections if len(st.path(s.index)) == 2]
    assert [s.number for s in tops] == ["1", "2", "3", "4"]
    assert [s.title for s in tops] == ["Scope", "Fees", "Reporting", "Termination"]


def test_sub_clauses_nest_under_their_own_article_not_the_previous_sub_clause():
    paths = {p[-1]: p for p in _paths(TEXT).values()}
    assert paths["4.1. For Cause"][1:] == ["4. Termination", "4.1. For Cause"]
    assert paths["3.1. Reports"][1:] == ["3. Reporting", "3.1. Reports"]


def test_a_term_defined_in_bold_inside_quotes_is_a_defined_term():
    st = parse_structure("1.\tDefinitions.\n\n"
                         "1.1.\t\u201c**Vendor**\u201d means the party named as vendor in an order.\n")
    assert "Vendor" in {t.term for t in st.terms}
