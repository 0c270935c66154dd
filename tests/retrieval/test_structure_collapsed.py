"""retrieval.structure on plain text converted from a PDF whose paragraph breaks became runs of spaces on one
line (filings published as text do this). The snippets are synthetic (written for these tests, not copied from a
dev document or a filing).
"""

from __future__ import annotations

from agentctx.agents.clause_candidates import draw_candidates
from agentctx.retrieval.sentences import blocks
from agentctx.retrieval.structure import parse_structure

# One physical line per page: the article heading, its sections and their paragraphs run together, each break
# written as five spaces, each wrapped line as two.
_COLLAPSED = (
    "SERVICES AGREEMENT\n\n"
    "     This Services Agreement is made by and between Alder Corp. (the \"Client\") and Birch LLC (the "
    "\"Vendor\").     ARTICLE IV  FEES     Section 4.01 Fees. The Client will pay the Vendor the fees set out "
    "in Schedule 1 within thirty days of each invoice.     Section 4.02 Taxes. Each party bears its own taxes."
    "     ARTICLE V  SECRECY     Section 5.01 Secret Information. All business information that one party "
    "gives the  other is secret information of the giving party. Secret information so given shall not be "
    "divulged, copied or used  except to carry out this Agreement.     Section 5.02 Term. This Agreement "
    "begins on the date above and  continues for two years.\n"
)


def _names(text: str) -> list[str]:
    return [s.name for s in parse_structure(text).sections]


def test_a_run_of_spaces_before_an_article_or_a_titled_section_opens_it():
    names = _names(_COLLAPSED)
    for name in ("ARTICLE IV FEES", "Section 4.01 Fees", "Section 4.02 Taxes", "ARTICLE V SECRECY",
                 "Section 5.01 Secret Information", "Section 5.02 Term"):
        assert name in names, names
    st = parse_structure(_COLLAPSED)
    sec = next(s for s in st.sections if s.name == "Section 5.01 Secret Information")
    assert st.sections[sec.parent].name == "ARTICLE V SECRECY"


def test_a_wrapped_lines_run_before_a_cross_reference_is_no_break():
    """A hard-wrapped paragraph joined into one line keeps its wrap as a run of spaces; "Section 9.2 of this
    Agreement" after it is a reference (no capitalised title follows, and the words before it run on)."""
    text = ("7.1     Release. The Vendor may release the materials to the Client as provided in         "
            "Section 9.2 of this Agreement, and the Client will hold them as set out in         Section 3 "
            "hereof.\n")
    assert len(blocks(text)) == 1
    assert _names(text) == ["7.1 Release"]


def test_the_confidentiality_heading_lifts_its_passive_duty_in_the_collapsed_layout():
    st = parse_structure(_COLLAPSED)
    dec = draw_candidates(st, "confidentiality")
    assert dec.found
    cited = " ".join(_COLLAPSED[dec.best.start:dec.best.end].split())
    assert cited.startswith("Secret information so given shall not be divulged")
    assert dec.best.section_name.endswith("Section 5.01 Secret Information")


def test_a_cross_reference_wrapped_to_the_start_of_a_line_opens_no_section():
    """"Clause 4.2, each party ..." at the start of a hard-wrapped line continues a sentence: it is neither a block of
    its own nor a section numbered "4" (before, the sentence was cut there and the quote began at "2, each party")."""
    text = ("4. Secrecy\n\n"
            "4.1. During the term, subject to the exceptions in\n"
            "Clause 4.2, each party will keep the other's secret information secret.\n\n"
            "4.2. The duty does not cover public information.\n")
    st = parse_structure(text)
    assert [s.number for s in st.sections] == ["4", "4.1", "4.2"]
    assert any(text[u.start:u.end].startswith("During the term, subject to the exceptions in\nClause 4.2, each party")
               for u in st.units)


def test_a_run_of_spaces_before_a_bare_numbered_title_or_a_lettered_item_opens_it():
    """A page joined into one line whose clauses are bare numbers with run-in titles ("   3. Supply. The Maker
    ...") and lettered items ("   a. Unless ..."): each opens its clause, so a term stated in item "a." is not
    quoted with the grounds of termination in item "b." after it."""
    text = ("2. Scope. The Maker supplies the Goods to the Dealer.   3. Ending.   a. Unless ended earlier, this "
            "Agreement lasts for the period named above (which starts on the Start Date).   b. This Agreement may "
            "be ended by the Dealer at once if the Maker stops trading.   4. Law. This Agreement is governed by "
            "the laws of the State of Ohio.\n")
    names = _names(text)
    for name in ("2. Scope", "3. Ending", "a.", "b.", "4. Law"):
        assert name in names, names
    st = parse_structure(text)
    dec = draw_candidates(st, "term")
    assert dec.found
    cited = " ".join(text[dec.best.start:dec.best.end].split())
    assert cited.startswith("Unless ended earlier") and cited.endswith("(which starts on the Start Date).")
