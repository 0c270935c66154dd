"""retrieval.structure on Word documents converted to Markdown (pandoc): heading levels without clause numbers.

A converter keeps a paragraph's heading level after dropping its clause number, so an article is
"# **Title**" followed by "# body ..." and its items are "## ***Title*.** body ...", sometimes mixed
with the numbers that survived ("3.  # *Title*.", "B.  ## *Title*. ..."). Snippets written for these
tests; none is taken from a dev document or a published agreement.
"""

from __future__ import annotations

from agentctx.retrieval.structure import parse_structure


def _tree(text: str) -> list[tuple[int, str]]:
    return [(s.level, s.name) for s in parse_structure(text).sections]


def test_markdown_levels_nest_unnumbered_items_under_their_article_with_inline_titles():
    text = ("# **Fees**\n\n"
            "# The Buyer will pay the Seller the amounts listed in the order form.\n\n"
            "# **Ending the Arrangement**\n\n"
            "## ***Duration*.** This arrangement starts on the signing date and lasts two years.\n\n"
            "## ***Early End*.** Either side may end this arrangement on thirty days' written notice.\n\n"
            "### The Buyer will settle open invoices within ten days of the end date; and\n\n"
            "# **General**\n\n"
            "## ***Law*.** The laws of Ontario govern this arrangement.\n")
    assert _tree(text) == [(1, "Fees"), (1, "Ending the Arrangement"), (2, "Duration"), (2, "Early End"),
                           (3, "(untitled)"), (1, "General"), (2, "Law")]
    st = parse_structure(text)
    # the same-level paragraph right after a title heading is its body, quoted without the marker
    fees_units = [st.text[u.start:u.end] for u in st.units if u.section == 0]
    assert fees_units == ["The Buyer will pay the Seller the amounts listed in the order form."]
    law = [st.text[u.start:u.end] for u in st.units if u.section == 6]
    assert law == ["The laws of Ontario govern this arrangement."]


def test_an_unnumbered_markdown_article_closes_the_numbered_article_before_it():
    text = ("1.  # *Sale*. The Seller sells the goods to the Buyer.\n\n"
            "2.  # *Limits on Resale.*\n\n"
            "A.  ## *Notices*. The Buyer shall tell the Seller before any resale.\n\n"
            "B.  ## *Records*. The Buyer shall keep records of each resale.\n\n"
            "# *First Offer*. Before any resale the Buyer must first offer the goods to the Seller.\n\n"
            "A.  ## *Offer Notice*. The offer states the price asked.\n\n"
            "3.  # *Taxes*. Each side bears its own taxes.\n")
    assert _tree(text) == [(1, "1. Sale"), (1, "2. Limits on Resale"), (2, "A. Notices"), (2, "B. Records"),
                           (1, "First Offer"), (2, "A. Offer Notice"), (1, "3. Taxes")]


def test_a_markdown_heading_that_is_a_definition_lead_in_is_no_title():
    text = ("# **Definitions of Control**\n\n"
            "## For purposes of this arrangement, a \"Sale Event\" means either:\n\n"
            "(1) ### a merger of the Seller into another company; or\n\n"
            "(2) ### a sale of all of the Seller's assets.\n")
    st = parse_structure(text)
    titles = [s.title for s in st.sections]
    assert not any("Sale Event" in t for t in titles), titles
    lead_in = [st.text[u.start:u.end] for u in st.units if "means either" in st.text[u.start:u.end]]
    assert lead_in == ["For purposes of this arrangement, a \"Sale Event\" means either:"]
