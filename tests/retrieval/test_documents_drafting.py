"""Documents of other drafting families inside one case file: Markdown and HTML titles, click-through
openings, "by and among" and "Between:" preambles, exhibits named by the agreement before them.

Every snippet is written for these tests; each rule's test failed before the rule."""

from __future__ import annotations

from agentctx.retrieval.documents import split_documents

# A non-legal stretch between agreements, as in the case-file bench (technical text).
FILLER = "The tool reads each input file and prints one summary line per file.\n\n" * 30

SUPPLY = """SUPPLY AGREEMENT

This Supply Agreement (the "Agreement") is entered into as of March 3, 2025 by and between Northwind
Parts Ltd. ("Supplier") and Harbor Tools Inc. ("Buyer").

1. Supply. Supplier will deliver the Products described in Exhibit A.

2. Payment. Buyer will pay each invoice within 45 days of receipt.

IN WITNESS WHEREOF, the parties have executed this Agreement as of the date first written above.

By: ______________________
"""

MARKDOWN = """# Widget Hosting Agreement (Version 3)

**1.\tScope**. Provider hosts the widgets that Customer uploads to the hosting service.

**2.\tDefinitions**.

2.1.\t"Widget" means a packaged web component uploaded by Customer.

2.2.\t"Fees" means the amounts stated in the order.
"""

CLICK_THROUGH = """PLEASE READ THESE TERMS CAREFULLY BEFORE STARTING A TRIAL. BY CLICKING "ACCEPT" OR BY USING THE \
SERVICE, YOU AGREE TO THIS TRIAL AGREEMENT ON BEHALF OF YOUR COMPANY ("CUSTOMER").

### 1. Trial Access

Customer may use the hosted service for thirty days without charge.

### 2. Feedback

Customer may send the provider comments on the service.
"""


def _reviewed(text):
    return [p for p in split_documents(text) if p.reviewed]


def _whole(text, doc, parts):
    """The one part that holds all of ``doc`` and nothing of another document."""
    s = text.index(doc.strip())
    e = s + len(doc.strip())
    own = [p for p in parts if p.start < e and s < p.end]
    assert len(own) == 1, [(p.name, p.start, p.end) for p in own]
    return own[0]


def _after_supply(doc):
    """``doc`` after SUPPLY, each after filler: (the text, the one part holding all of ``doc``), two parts in all."""
    text = FILLER + SUPPLY + FILLER + doc
    parts = _reviewed(text)
    assert len(parts) == 2, [(p.name, p.start, p.end) for p in parts]
    return text, _whole(text, doc, parts)


def test_a_markdown_title_is_confirmed_by_numbering_inside_emphasis():
    """"**1.\\tScope**." restarts the numbering as "1. Scope." does (it was skipped, and "2.1." read first)."""
    text = FILLER + SUPPLY + FILLER + MARKDOWN
    parts = _reviewed(text)
    assert len(parts) == 2
    assert _whole(text, MARKDOWN, parts).name == "Widget Hosting Agreement (Version 3)"  # no "#" in the name


def test_markdown_heading_numbers_count_as_numbering():
    doc = "Cloud Storage Agreement\n\n### 1. Storage\n\nProvider stores the files.\n\n### 2. Fees\n\nCustomer pays.\n"
    text = FILLER + SUPPLY + FILLER + doc
    assert _whole(text, doc, _reviewed(text)).name == "Cloud Storage Agreement"


def test_an_untitled_click_through_opening_starts_a_document():
    text = FILLER + SUPPLY + FILLER + CLICK_THROUGH
    parts = _reviewed(text)
    assert len(parts) == 2
    own = _whole(text, CLICK_THROUGH, parts)
    assert own.name == "TRIAL AGREEMENT"  # "this Trial Agreement", not "the terms" it mentions first
    assert text[own.start:].startswith("PLEASE READ")


def test_acceptance_inside_an_agreement_opens_nothing():
    """A numbered acceptance clause, or an acceptance sentence not followed by numbering starting again."""
    clause = ("\n\n3. Acceptance. By using the Products, you agree to this Supply Agreement.\n\n"
              "By using the portal, you agree to these portal terms and to this Supply Agreement.\n\n"
              "4. Notices. Notices go to the addresses above.\n")
    text = SUPPLY.replace("\n\nIN WITNESS", clause + "\nIN WITNESS")
    assert len(split_documents(text)) == 1


def test_a_preamble_by_and_among_opens_a_document():
    doc = ("This Stock Purchase Agreement is entered into as of May 1, 2025 by and among Lumen Labs, Inc., a "
           "Delaware corporation (the \"Company\"), and the purchasers listed on Schedule A.\n\n"
           "1. Purchase and Sale. Each Purchaser agrees to buy the Shares.\n")
    _, part = _after_supply(doc)
    assert part.name == "Stock Purchase Agreement"


def test_a_dated_preamble_with_the_parties_in_a_between_block_opens_a_document():
    doc = ("This agreement is dated 1 May 2025\n\nBETWEEN:\n\n(1) Fernbank Consulting Limited, a company "
           "incorporated in England; and\n\n(2) Tidewater Media Limited.\n\n1. Services. The Consultant will "
           "provide the Services.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("This agreement is dated")


def test_an_html_title_is_read_on_its_visible_text():
    doc = ("<h1>Registry Account Agreement</h1>\n\n1. Accounts. The Registry opens one account for the "
           "Subscriber.\n\n2. Fees. The Subscriber pays the fees of the schedule.\n")
    _, part = _after_supply(doc)
    assert part.name == "Registry Account Agreement"


def test_titles_of_other_instruments_open_documents():
    for title in ("Website Terms", "Convertible Promissory Note", "Terms of Sale", "Subscription Terms"):
        doc = f"{title}\n\n1. Scope. These provisions apply to each order.\n\n2. Price. The price is stated.\n"
        _, part = _after_supply(doc)
        assert part.name == title, title


def test_an_exhibit_the_agreement_names_stays_with_it():
    exhibit = ("EXHIBIT A\n\nSTATEMENT OF WORK\n\n1. Products. Brass fittings, sizes 1 to 4.\n\n"
               "2. Delivery. Monthly, to the Buyer's warehouse.\n")
    text = FILLER + SUPPLY + "\n" + exhibit
    parts = _reviewed(text)
    assert len(parts) == 1 and "Brass fittings" in text[parts[0].start:parts[0].end]


def test_an_exhibit_label_nothing_names_heads_a_document_of_its_own():
    """A licence filed as "EXHIBIT 1" after an agreement that never mentions an Exhibit 1."""
    doc = ("EXHIBIT 1\n\nNORTHWIND DATA LICENSE AGREEMENT\n\n1. Grant. Licensor grants a licence to the data.\n\n"
           "2. Fees. None.\n")
    text = FILLER + SUPPLY + FILLER + doc
    assert len(_reviewed(text)) == 2


# Second pass (BENCHMARKS §2b, split-tuning half): false boundaries inside an agreement, starts not found.

def _inside_supply(block):
    """SUPPLY with ``block`` between its two clauses, after filler: one agreement."""
    return FILLER + SUPPLY.replace("\n\n2. Payment.", "\n\n" + block + "\n\n2. Payment.")


def test_a_heading_that_refers_to_its_instrument_is_a_clause_not_a_title():
    """"Reading this Agreement" over "This Agreement uses ...": a title names its instrument, a clause refers to it."""
    for block in ("Reading this Supply Agreement\n\nThis Supply Agreement uses words with special meanings.",
                  "## Interpreting these Supply Terms\n\nThese Supply Terms use words with special meanings.",
                  "The following definitions apply in this Agreement.\n\n1. Products. The goods of Exhibit A."):
        assert len(_reviewed(_inside_supply(block))) == 1, block


def test_the_heading_of_the_operative_part_is_not_a_title():
    block = ("WHEREAS, Buyer wishes to buy the Products.\n\nAGREEMENT\n\nNOW, THEREFORE, the parties agree as "
             "follows:\n\n1. Orders. Buyer orders by purchase order.")
    assert len(_reviewed(_inside_supply(block))) == 1


def test_a_warning_about_one_section_is_not_a_click_through_opening():
    clauses = "".join(f"{n}. Delivery terms. Supplier ships lot {n} to the Buyer's dock by the agreed date.\n\n"
                      for n in range(3, 90))
    block = (clauses + "Please read this section carefully: it limits what either party owes under this Supply "
             "Agreement.\n\n"
             "1. Cap. Neither party owes more than the fees paid.")
    assert len(_reviewed(_inside_supply(block))) == 1


def test_an_execution_line_as_a_deed_is_not_a_title():
    deed = SUPPLY.replace("By: ______________________\n", "Signed as a deed\n\nby Jane Ames in the presence of a "
                          "witness\n\nExecuted as a deed by Harbor Tools Inc.\n")
    text = FILLER + deed + FILLER[:1000] + SUPPLY
    parts = _reviewed(text)
    assert len(parts) == 2 and "Executed as a deed" in text[parts[0].start:parts[0].end]


def test_a_markdown_title_of_level_three_and_an_nda_title_open_documents():
    for doc, name in (("### The Harbor Cloud Terms of Service\nEffective date: May 1, 2025\n\n### A. Definitions\n\n"
                       "1. The \"Service\" is the hosted storage.\n\n2. \"You\" is the account holder.\n",
                       "The Harbor Cloud Terms of Service"),
                      ("# Harbor Mutual NDA (Version 2.0)\n\n1. **Purpose**. Each party may disclose information.\n\n"
                       "2. **Use**. The recipient uses it for the purpose only.\n", "Harbor Mutual NDA (Version 2.0)")):
        _, part = _after_supply(doc)
        assert part.name == name, name


def test_a_comment_or_front_matter_above_a_title_belongs_to_its_document():
    for doc in ("<!--\nSPDX-License-Identifier: CC0-1.0\n-->\n\n# Harbor Contributor Agreement\n\n"
                "1. Grant. You license your contributions to the project.\n\n2. Warranty. None.\n",
                "{% load forms %}\n---\ntitle: HOSTING AGREEMENT\nlayout: letter\n- margin=1in\n---\n\n"
                "**THIS HOSTING AGREEMENT** (the \"Agreement\") is entered into as of May 1, 2025 by and between "
                "Harbor Cloud Inc. and the Customer.\n\n1. Hosting. Harbor hosts the Customer's site.\n"):
        text, part = _after_supply(doc)
        assert text[part.start:].startswith(doc[:10]), doc[:20]


def test_an_emphasised_title_joined_to_a_release_opens_with_first_person_acceptance():
    doc = ("<strong>VOLUNTEER AGREEMENT & RELEASE</strong>\n\nI accept the invitation of Harbor Events Inc. to help at "
           "the event listed below, on the terms set out here.\n\nI release Harbor Events Inc. from claims for loss "
           "of my equipment.\n")
    _, part = _after_supply(doc)
    assert part.name == "VOLUNTEER AGREEMENT & RELEASE"


def test_the_letter_that_encloses_an_agreement_belongs_to_it():
    doc = ("Dear Ms. Ames,\n\nWe are pleased to offer you the post of buyer from June 2, 2025.\n\nOffer Summary\n\n"
           "Salary: EUR 50,000\n\nEmployment Agreement\n\nThis agreement is made on 2 June 2025.\n\nBetween:\n\n"
           "(1) Harbor Tools Ltd; and (2) Jane Ames.\n\n1. Duties. The Employee works as a buyer.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("Dear Ms. Ames")
