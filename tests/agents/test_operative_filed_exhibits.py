"""The operative sentence in agreements filed as exhibits (a reseller agreement, an endorsement agreement) and in
a lead-in whose items carry the duty. Short clauses written for these tests; none is taken from a dev document or
a published agreement. docs/REVIEW.md, "The operative sentence of each kind".
"""

from __future__ import annotations

from agentctx.agents.clause_candidates import draw_candidates
from agentctx.retrieval.structure import parse_structure
from tests.agents.cited import best_sentence as _best
from tests.agents.cited import kind_found


def test_an_exclusion_beside_a_denied_indemnity_is_the_liability_clause():
    """"shall not be liable ..., and shall have no obligation to indemnify" excludes liability; the indemnity it
    names is denied, so it is no look-alike of an indemnity."""
    text = ("9. Limits. EXCEPT FOR FRAUD, THE AGENT SHALL NOT BE LIABLE TO THE MAKER, AND SHALL HAVE NO "
            "OBLIGATION TO INDEMNIFY THE MAKER, FOR ANY LOSS CAUSED BY THE GOODS.\n\n"
            "10. Notices. Notices are given in writing.\n")
    assert _best(text, "liability_cap").startswith("EXCEPT FOR FRAUD, THE AGENT SHALL NOT BE LIABLE")
    assert not kind_found(text, "indemnity")


def test_keeping_in_trust_and_confidence_is_the_duty_not_its_exclusions():
    text = ("7. Trade Data. Each side may receive the other's business data (\"Trade Data\"). The sides shall, "
            "during and after this Agreement, keep in trust and confidence all Trade Data of the other side; nor "
            "shall a side or its staff disclose any Trade Data of the other to any person without consent. "
            "Neither side shall be bound by this Section with respect to data that enters the public domain "
            "without breach of any duty of nondisclosure.\n")
    assert _best(text, "confidentiality").startswith("The sides shall, during and after this Agreement, keep in "
                                                    "trust and confidence")


def test_neither_side_having_the_right_to_assign_is_the_restriction():
    text = ("20. Transfer\n\n"
            "Neither the Maker nor the Athlete shall have the right to grant sublicences hereunder or to assign, "
            "pledge or otherwise transfer any of its rights or obligations hereunder.\n")
    assert _best(text, "assignment").startswith("Neither the Maker nor the Athlete shall have the right")


def test_a_lead_in_whose_items_disclose_is_the_confidentiality_duty_with_its_items_and_object():
    """"You will neither ... nor ...:" over "(a) use ...;", "(b) disclose ...;" and the object paragraph they share:
    the duty is the lead-in read with its items, cited with them up to the object (before, no sentence carried it
    and the kind was reported absent)."""
    text = ("8. Secrecy\n\n"
            "8.1 You will neither during the engagement nor at any time after it, directly or indirectly:\n\n"
            "(a) use for any purpose of your own; or\n\n"
            "(b) pass on to any person whatsoever;\n\n"
            "any secret plans or formulas of the Firm or of its customers.\n\n"
            "8.2 You will tell the Firm at once of any loss of its papers.\n")
    assert not kind_found(text, "confidentiality")  # no word of disclosure: the items alone decide nothing
    text = text.replace("(b) pass on to any person", "(b) disclose to any person")
    dec = draw_candidates(parse_structure(text), "confidentiality")
    assert dec.found
    cited = " ".join(text[dec.best.start:dec.best.end].split())
    assert cited.startswith("You will neither during the engagement")
    assert cited.endswith("any secret plans or formulas of the Firm or of its customers.")


def test_an_item_that_carries_the_kind_alone_is_cited_not_its_lead_in():
    """The lead-in is read with its items only when it makes them operative: an item that states the law on its
    own stays the citation."""
    text = ("3. Transfers\n\n"
            "3.1 Where data leaves the region, the sides agree that:\n\n"
            "(a) the standard clauses apply; and\n\n"
            "(b) the clauses are governed by the laws of the State of Ohio.\n\n"
            "4. Notices. Notices are given in writing.\n")
    assert _best(text, "governing_law").startswith("the clauses are governed by the laws of the State of Ohio")
