"""End to end on the rules path: an agreement whose numbering restarts inside a plain-text article, with
the second side's indemnity in that article. The agreement is synthetic, written for this test.
"""

from __future__ import annotations

from agentctx.agents import CLAUSE_KINDS
from agentctx.agents.clause_candidates import rules_only
from agentctx.agents.review_steps import kind_scope, risk_scope
from agentctx.agents.risk_rules import evaluate_rules
from agentctx.retrieval.structure import parse_structure

AGREEMENT = """RESELLER AGREEMENT

This Reseller Agreement (the "Agreement") is entered into as of May 1, 2031 by and between Tidewell \
Instruments Inc. ("Company") and Marrow & Finch LLC ("Partner").

1. Appointment. Company appoints Partner as a non-exclusive reseller of the Products in the Territory.

2. Term. This Agreement commences on the Effective Date and continues for two (2) years.

3. Fees. Partner will pay Company the prices in each order within thirty (30) days after the invoice date.

4. Protection by Company. Company will defend, indemnify and hold harmless Partner from and against all \
third-party claims that a Product infringes a patent or copyright.

5. Exceptions. Company has no obligation for claims caused by Partner's changes to a Product.

ARTICLE SIX
INDEMNIFICATION BY PARTNER

1. Protection by Partner. Partner will indemnify, defend and hold harmless Company from and against all \
claims arising from Partner's marketing statements about the Products.

2. Conditions. The indemnified party will give prompt written notice of a claim.

3. Exceptions. Partner has no obligation for statements that Company approved in writing.

7. Limitation of Liability

7.1 Neither party's total liability under this Agreement will exceed the fees paid in the twelve (12) \
months before the claim.

8. Governing Law. This Agreement is governed by the laws of the State of Oregon.

IN WITNESS WHEREOF, the parties have executed this Agreement as of the Effective Date.

TIDEWELL INSTRUMENTS INC.

By: ______________________
Name: Hedda Lorne
Title: President

MARROW & FINCH LLC

By: ______________________
Name: Caspar Venn
Title: Managing Member
"""


def _section(st, name: str):
    return next(s for s in st.sections if s.name == name)


def test_an_indemnity_in_a_later_article_makes_the_indemnity_mutual():
    st = parse_structure(AGREEMENT)
    # The tree: the article holds its restarted clauses; "7." follows the article; signatures stand apart.
    art = _section(st, "ARTICLE SIX")
    assert art.parent is None
    assert [s.name for s in st.path(_section(st, "1. Protection by Partner").index)] == \
        ["ARTICLE SIX", "INDEMNIFICATION BY PARTNER", "1. Protection by Partner"]
    assert _section(st, "7. Limitation of Liability").parent is None
    assert _section(st, "Signatures").parent is None and _section(st, "8. Governing Law").end < \
        AGREEMENT.index("IN WITNESS")

    chosen = rules_only(st, CLAUSE_KINDS)
    found = chosen["indemnity"]
    assert found is not None
    # The risk rule as the review runs it says mutual: Partner's indemnity in the article beside Company's in "4.".
    assert evaluate_rules("indemnity", AGREEMENT, risk_scope(st, "indemnity", found.start)) == []
    # The kind's own sections (its headings, the section around the finding) are the whole article.
    scope = kind_scope(st, "indemnity", AGREEMENT.index("Partner will indemnify"))
    assert [AGREEMENT[a:b] for a, b in scope][-2:] == [
        "The indemnified party will give prompt written notice of a claim.",
        "Partner has no obligation for statements that Company approved in writing."]
    # The other kinds are read from their own clauses, not from the article or the signatures.
    assert chosen["liability_cap"].section_name == "7. Limitation of Liability > 7.1"
    assert chosen["governing_law"].section_name == "8. Governing Law"
