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
    text = FILLER + SUPPLY + FILLER + doc
    parts = _reviewed(text)
    assert len(parts) == 2 and _whole(text, doc, parts).name == "Stock Purchase Agreement"


def test_a_dated_preamble_with_the_parties_in_a_between_block_opens_a_document():
    doc = ("This agreement is dated 1 May 2025\n\nBETWEEN:\n\n(1) Fernbank Consulting Limited, a company "
           "incorporated in England; and\n\n(2) Tidewater Media Limited.\n\n1. Services. The Consultant will "
           "provide the Services.\n")
    text = FILLER + SUPPLY + FILLER + doc
    parts = _reviewed(text)
    assert len(parts) == 2 and text[_whole(text, doc, parts).start:].startswith("This agreement is dated")


def test_an_html_title_is_read_on_its_visible_text():
    doc = ("<h1>Registry Account Agreement</h1>\n\n1. Accounts. The Registry opens one account for the "
           "Subscriber.\n\n2. Fees. The Subscriber pays the fees of the schedule.\n")
    text = FILLER + SUPPLY + FILLER + doc
    parts = _reviewed(text)
    assert len(parts) == 2 and _whole(text, doc, parts).name == "Registry Account Agreement"


def test_titles_of_other_instruments_open_documents():
    for title in ("Website Terms", "Convertible Promissory Note", "Terms of Sale", "Subscription Terms"):
        doc = f"{title}\n\n1. Scope. These provisions apply to each order.\n\n2. Price. The price is stated.\n"
        text = FILLER + SUPPLY + FILLER + doc
        parts = _reviewed(text)
        assert len(parts) == 2 and _whole(text, doc, parts).name == title, title


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
