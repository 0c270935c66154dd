"""retrieval.structure on agreements whose numbering restarts inside plain-text articles, and on
signature blocks. The snippets are synthetic (written for these tests, not copied from a dev document).
"""

from __future__ import annotations

import pytest

from agentctx.retrieval.section_markers import ordinal
from agentctx.retrieval.structure import parse_structure


def _tree(text: str) -> list[tuple[int, str]]:
    return [(s.level, s.name) for s in parse_structure(text).sections]


def _parent_name(st, name: str) -> str | None:
    s = next(s for s in st.sections if s.name == name)
    return st.sections[s.parent].name if s.parent is not None else None


_BEFORE = ("1. Appointment. Maker appoints Agent as its non-exclusive agent in the Territory.\n\n"
           "2. Duties. Agent will promote the Goods.\n\n"
           "3. Exceptions. Agent need not promote Goods that Maker withdraws.\n\n")
_AFTER = ("1. Protection by Maker. Maker will defend and indemnify Agent against claims that the Goods infringe.\n\n"
          "2. Notice. The indemnified party will give prompt notice of a claim.\n\n")


@pytest.mark.parametrize("heading", ["ARTICLE 9", "Article IX \u2013 Indemnification", "ARTICLE NINE",
                                     "Article Nine: Indemnification"])
def test_an_article_after_numbered_clauses_holds_the_restarted_numbering(heading):
    st = parse_structure(_BEFORE + heading + "\n\n" + _AFTER)
    art = next(s for s in st.sections if s.style == "kw:article")
    assert art.level == 1 and art.parent is None  # not a sub-clause of "3. Exceptions"
    assert _parent_name(st, "1. Protection by Maker") == art.name
    assert _parent_name(st, "2. Notice") == art.name


def test_the_documents_own_numbering_after_an_article_is_its_sibling():
    text = ("ARTICLE 8\n\n" + _BEFORE + "Article 9\n\n" + _AFTER +
            "3. Exceptions. Maker owes nothing for claims caused by Agent's changes to the Goods.\n\n"
            "10. Agent's Indemnity\n\n"
            "10.1 Agent will indemnify Maker against claims arising from Agent's negligence.\n\n"
            "11. Notices\n\nNotices must be in writing.\n")
    assert _tree(text) == [
        (1, "ARTICLE 8"), (2, "1. Appointment"), (2, "2. Duties"), (2, "3. Exceptions"),
        (1, "Article 9"), (2, "1. Protection by Maker"), (2, "2. Notice"), (2, "3. Exceptions"),
        (1, "10. Agent's Indemnity"), (2, "10.1"),
        (1, "11. Notices"),
    ]


def test_an_articles_own_continuous_numbering_stays_inside_it():
    # "ARTICLE 2" holding "3." and "4.": numbering that runs on across articles, not the article's sibling.
    text = ("ARTICLE 1\n\n1. Scope. Supplier will deliver the Goods.\n\n2. Price. Buyer will pay the Price.\n\n"
            "ARTICLE 2\n\n3. Delivery. Supplier will deliver within ten days.\n\n4. Risk. Risk passes on delivery.\n")
    assert _tree(text) == [(1, "ARTICLE 1"), (2, "1. Scope"), (2, "2. Price"),
                           (1, "ARTICLE 2"), (2, "3. Delivery"), (2, "4. Risk")]


def test_an_all_caps_title_between_numbered_clauses_opens_a_part_when_the_numbering_restarts():
    st = parse_structure(_BEFORE + "INDEMNIFICATION\n\n" + _AFTER +
                         "GENERAL PROVISIONS\n\n1. Notices. Notices must be in writing.\n")
    assert [(s.level, s.name) for s in st.sections] == [
        (1, "1. Appointment"), (1, "2. Duties"), (1, "3. Exceptions"),
        (1, "INDEMNIFICATION"), (2, "1. Protection by Maker"), (2, "2. Notice"),
        (1, "GENERAL PROVISIONS"), (2, "1. Notices"),
    ]


def test_an_all_caps_line_without_a_restart_is_still_a_sub_heading():
    # The numbering goes on after it ("3." after "2."): a title inside the open clause, as before.
    text = ("1. Fees. Buyer will pay the Price.\n\n2. Invoices. Seller will invoice monthly.\n\n"
            "LATE PAYMENT\n\n3. Interest. Late amounts bear interest.\n")
    assert _tree(text) == [(1, "1. Fees"), (1, "2. Invoices"), (2, "LATE PAYMENT"), (1, "3. Interest")]


_SIGNED = ("IN WITNESS WHEREOF, the parties have signed this Agreement on the Effective Date.\n\n"
           "ORCHARD VALE LIMITED\n\nBy: ____________________\nName: Mira Holt\nTitle: Director\n\n"
           "Kestrel Shipping Co.\n\nBy: ____________________\nName: Arun Pike\nTitle: Chief Executive Officer\n")


def test_a_signature_block_is_its_own_top_level_part():
    text = "1. Term. This Agreement lasts two years.\n\n2. Notices. Notices must be in writing.\n\n" + _SIGNED
    st = parse_structure(text)
    assert [(s.level, s.name) for s in st.sections] == [(1, "1. Term"), (1, "2. Notices"), (1, "Signatures")]
    notices, sig = st.sections[1], st.sections[2]
    assert notices.end <= text.index("IN WITNESS")  # the last clause ends before it
    quoted = [" ".join(text[u.start:u.end].split()) for u in st.units if u.section == sig.index]
    # The witness sentence stays quotable; names, "By:" and "Title:" lines are not sentences of a clause.
    assert quoted == ["IN WITNESS WHEREOF, the parties have signed this Agreement on the Effective Date."]


def test_a_signature_block_without_in_witness_takes_the_names_above_by_and_ends_at_an_exhibit():
    text = ("ARTICLE 1\n\n1. Term. This Agreement lasts two years.\n\n2. Notices. Notices must be in writing.\n\n"
            "ORCHARD VALE LIMITED\n\nBy: ____________________\nName: Mira Holt\n\n"
            "EXHIBIT A\n\n1. Services. Orchard Vale will store the Goods.\n")
    st = parse_structure(text)
    assert [(s.level, s.name) for s in st.sections] == [
        (1, "ARTICLE 1"), (2, "1. Term"), (2, "2. Notices"), (1, "Signatures"), (1, "EXHIBIT A"), (2, "1. Services")]
    assert st.sections[3].start == text.index("ORCHARD VALE LIMITED")


@pytest.mark.parametrize("num, value", [("9", 9), ("IX", 9), ("NINE", 9), ("Twenty-One", 21), ("I", 1),
                                        ("9.1", None), ("a", None), ("B", None)])
def test_ordinal_reads_whole_numbers_as_written(num, value):
    assert ordinal(num) == value


def test_by_in_running_text_opens_no_signature_block():
    text = ("1. Notices. Notices must be in writing and delivered as follows:\n\nBy: courier\n\n"
            "2. Term. This Agreement lasts two years.\n")
    assert [name for _, name in _tree(text)] == ["1. Notices", "2. Term"]



_BODY = "The parties wish to work together on the terms below, as the sentences of this part say at length.\n\n"


def _with_part(part: str, a1: str, a2: str) -> str:
    # A body paragraph first: headings right under the document's title are its title lines.
    return (f"EXAMPLE SOFTWARE AGREEMENT\n\nThis agreement is made between the parties named below.\n\n"
            f"{part}\n\n{_BODY}{_BODY}{a1}\n\n{_BODY}{a2}\n\n{_BODY}")


_ARTICLES = [("Article 1 - DEFINITIONS", "Article 2 - TERM"), ("ARTICLE I", "ARTICLE II"),
             ("1. Definitions", "2. Term")]


@pytest.mark.parametrize("prelim", ["Preamble", "RECITALS", "Background"])
@pytest.mark.parametrize("articles", _ARTICLES)
def test_articles_are_not_parts_of_the_preamble(prelim, articles):
    st = parse_structure(_with_part(prelim, *articles))
    pre, *arts = st.sections
    assert pre.title == prelim and pre.parent is None and len(arts) == 2
    assert all(a.parent is None for a in arts), [(a.name, a.parent) for a in arts]
    assert pre.end <= arts[0].start


@pytest.mark.parametrize("articles", _ARTICLES)
def test_a_titled_part_still_holds_its_articles(articles):
    """Only preliminary headings close: "Terms of Use" may hold the articles under it."""
    st = parse_structure(_with_part("Terms of Use", *articles))
    part, *arts = st.sections
    assert part.title == "Terms of Use" and [a.parent for a in arts] == [0, 0]


@pytest.mark.parametrize("line", ["Release Date: July 26, 2018", "Effective date: March 27, 2018",
                                  "Last updated May 2024", "Version 2.1"])
def test_a_date_or_version_line_heads_no_section(line):
    """Set like a heading under the title, a date or version line holds nothing after it: before, the
    NVIDIA SDK licence's every section was a child of its "Release Date"."""
    text = ("1. Example Software Licence\n-----------------------------\n\n"
            f"{line}\n-------------------------\n\n{_BODY}1.1. Licence\n\n{_BODY}1.2. Limitations\n\n{_BODY}")
    st = parse_structure(text)
    meta = next(s for s in st.sections if s.title == line)
    subs = [s for s in st.sections if s.number in ("1.1", "1.2")]
    assert len(subs) == 2 and all(s.parent != meta.index for s in subs), [(s.name, s.parent) for s in st.sections]
    assert meta.end <= subs[0].start
