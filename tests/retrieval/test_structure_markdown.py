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


# Agreements published as web pages: clause titles in HTML heading tags inside a Markdown list, sub-clauses set
# in by indentation (the same "1." numbering at every depth), a title heading over a preamble.
HOSTING = ("# Hosting terms\n\n"
           "These hosting terms (the **\"Agreement\"**) apply from the order date between Northwind Hosting Ltd "
           "(**\"Host\"**) and the client named in the order form (**\"Client\"**).\n\n"
           "1. <h2>Fees and invoices</h2>\n"
           "   1.  Host will invoice Client monthly in arrears.\n"
           "   2.  Client will pay each invoice within 30 days.\n"
           "2. <h2>Ending this arrangement</h2>\n"
           "   1.  This Agreement lasts until the end of the hosting period.\n"
           "   2.  Either party may terminate this Agreement at once by notice if the other party:\n"
           "       1.  breaches it and does not put the breach right within 10 days; or\n"
           "       2.  becomes insolvent.\n"
           "   3.  On expiry Client will pay all unpaid fees.\n"
           "3. <h2>General</h2>\n"
           "   1.  Neither party may assign this Agreement without the other party's written consent.\n")


def test_html_heading_tags_in_a_list_are_titles_whatever_their_case():
    st = parse_structure(HOSTING)
    top = [s.name for s in st.sections if s.level == 2]
    assert top == ["1. Fees and invoices", "2. Ending this arrangement", "3. General"], _tree(HOSTING)


def test_indentation_nests_a_restarted_numbering_and_an_outdented_item_closes_it():
    st = parse_structure(HOSTING)
    breach = next(u for u in st.units if "breaches it" in HOSTING[u.start:u.end])
    assert [x.name for x in st.path(breach.section)] == ["Hosting terms", "2. Ending this arrangement", "2.", "1."]
    expiry = next(u for u in st.units if "On expiry" in HOSTING[u.start:u.end])
    assert [x.name for x in st.path(expiry.section)] == ["Hosting terms", "2. Ending this arrangement", "3."]
    general = next(s for s in st.sections if s.title == "General")
    assert st.path(general.index)[0].title == "Hosting terms" and general.level == 2


def test_the_text_under_a_title_heading_that_names_the_instrument_is_the_preamble():
    st = parse_structure(HOSTING)
    opening = next(u for u in st.units if HOSTING[u.start:u.end].startswith("These hosting terms"))
    assert st.in_preamble(opening.start)
    assert {t.term for t in st.terms if t.how == "inline"} >= {"Agreement", "Host", "Client"}
    # a first heading that names no instrument is a clause title, its text no preamble
    fees = parse_structure("# **Fees**\n\n# The Buyer will pay the Seller within 30 days.\n\n# **General**\n\n"
                           "# Notices go to the addresses above.\n")
    assert fees.preamble is None


def test_an_item_set_back_to_the_left_closes_the_items_indented_under_the_one_before():
    text = ("3. **GRANTS**\n\n"
            "\t1. **Source**. The source code is offered under an open licence.\n"
            "\t2. **Marks**. The Owner grants the Maker a revocable licence to use the marks.\n\n"
            "4. **OWNERSHIP** The Maker accepts that the marks belong to the Owner.\n\n"
            "5. **TERM AND ENDING**. This Agreement starts on acceptance and lasts one (1) year.\n"
            "    1. **For Convenience**. Either party may terminate this Agreement on 30 days' notice.\n"
            "    2. **Effect**. Upon termination the Maker will stop using the marks.\n\n"
            "6. **GENERAL**.\n\n"
            "\t1. **Assignment**. The Maker may not assign this Agreement without the Owner's consent.\n")
    st = parse_structure(text)
    parents = {s.name: (st.sections[s.parent].name if s.parent is not None else None) for s in st.sections}
    assert parents["4."] is None and parents["6. GENERAL"] is None, parents
    assert parents["1. Assignment"] == "6. GENERAL" and parents["1. For Convenience"].startswith("5."), parents
