"""Where an agreement of a case file begins and ends, for drafting families the first rules missed: a clause
heading that names "the Agreement", conditions of purchase, a title confirmed by its parties line, a
"The parties to this Agreement are ..." preamble in HTML, a securities legend above a note's title, a
cover block between a title and its preamble, and an untitled "These terms govern ..." opening after
unrelated text.

Every snippet is written for these tests; each rule's test failed before the rule."""

from __future__ import annotations

from agentctx.retrieval.documents import split_documents

FILLER = "The tool reads each input file and prints one summary line per file.\n\n" * 30

SUPPLY = """SUPPLY AGREEMENT

This Supply Agreement (the "Agreement") is entered into as of March 3, 2025 by and between Northwind
Parts Ltd. ("Supplier") and Harbor Tools Inc. ("Buyer").

1. Supply. Supplier will deliver the Products described in Exhibit A.

2. Payment. Buyer will pay each invoice within 45 days of receipt.

IN WITNESS WHEREOF, the parties have executed this Agreement as of the date first written above.

By: ______________________
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
    assert len(parts) == 2, [(p.name, p.start, p.end, text[p.start:p.start + 40]) for p in parts]
    return text, _whole(text, doc, parts)


def test_a_heading_of_the_agreement_is_no_title():
    """"Scope of the Agreement" heads a clause of the agreement it is in; a title names its instrument."""
    doc = ("The Agreement is entered into between Harbor Tools Inc. (\"Buyer\") and the supplier named in the "
           "purchase order (\"Supplier\") and takes effect when the Supplier signs it or starts to perform.\n\n"
           "The Supplier shall keep the Buyer informed of any delay in delivery and shall give the Buyer "
           "written notice of any change in its prices before the change takes effect.\n\n"
           "## Scope of the Agreement\n\nThe Agreement covers goods, services and deliverables.\n\n"
           "1. Fees and payment. The Supplier shall invoice monthly in arrears.\n\n"
           "2. Delivery. The Supplier shall deliver the goods to the Buyer's site.\n")
    _after_supply(doc)


def test_general_conditions_of_purchase_are_a_title():
    doc = ("# Harbor General Conditions of Purchase\n\nThese Harbor General Conditions of Purchase (\"GCP\") "
           "apply to purchase orders issued by Harbor Tools Inc.\n\n## Delivery\n\nThe Supplier shall deliver "
           "the goods on the date stated in the purchase order.\n\n## Payment\n\nHarbor pays each invoice within "
           "sixty days.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("# Harbor General Conditions of Purchase")
    assert part.name == "Harbor General Conditions of Purchase"


def test_a_title_is_confirmed_by_the_parties_line_below_it():
    """"Between us, ... and you, ..." names the parties, as "by and between" does in a preamble."""
    doc = ("# Design Services Contract\n\nBetween us, Fernbank Studio (\"Fernbank\") and you, the client named "
           "in the proposal.\n\n## Summary\n\nWe will design the pages you ask for and you will pay us for "
           "the time we spend.\n\n## What both parties agree to do\n\nYou will give us the text and pictures we "
           "need.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("# Design Services Contract")


def test_the_parties_to_this_agreement_are_opens_a_document_in_html():
    """"The parties to this "... Agreement" are A and B" is a preamble; the opening tags above it are its markup."""
    doc = ("<section>\n  <p>The parties to this \"Registry Access Agreement\" (the \"Agreement\") are the "
           "Province of Westland (the \"Province\") and the Subscriber (as defined below).</p>\n</section>\n"
           "<section>\n  <header>1. DEFINITIONS</header>\n  <ul>\n    <li>\"Access\" means the right to use the "
           "Service;</li>\n  </ul>\n</section>\n<section>\n  <header>2. FEES</header>\n  <ul>\n    <li>The "
           "Subscriber shall pay the fees set by the Province.</li>\n  </ul>\n</section>\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("<section>")


def test_a_securities_legend_above_a_title_belongs_to_its_instrument():
    doc = ("THIS NOTE AND THE SECURITIES ISSUABLE UPON ITS CONVERSION HAVE NOT BEEN REGISTERED UNDER THE "
           "SECURITIES ACT OF 1933 AND MAY NOT BE SOLD OR TRANSFERRED EXCEPT AS PERMITTED UNDER THAT ACT.\n\n"
           "# CONVERTIBLE PROMISSORY NOTE\n\nFor value received, Lumen Labs, Inc. (the \"Company\") promises to "
           "pay to the holder the principal sum of this note.\n\n1. Interest. Interest accrues at 6% a year.\n\n"
           "2. Maturity. The note is due on the maturity date.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("THIS NOTE AND THE SECURITIES")


def test_a_preamble_below_its_title_and_cover_block_is_one_document():
    """The form's cover fields sit between the title and its preamble: one document, not two."""
    doc = ("# Fiscal Hosting Agreement\n\n**Effective Date:** ____________\n\n**Project:** ____________ "
           "(\"Project\")\n\n*Principal Office or Primary Address:* 1200 Long Street, Suite 400, Westland City, "
           "WL 12345\n\n*Project Signatories:* Ada Fernbank, Tom Tidewater and Lin Harbour, on behalf of the "
           "Project\n\n"
           "**Host:** *Westland Foundation, Inc.*\n\n*Host Address:* 12 Harbour Road, Westland\n\n"
           "*Host Email:* legal@example.org\n\n"
           "This Fiscal Hosting Agreement (\"Agreement\") is made by and between Westland Foundation (\"Host\") "
           "and the Project Signatories on behalf of the Project.\n\n## 1. Hosting\n\nThe Host holds the funds "
           "of the Project.\n\n## 2. Fees\n\nThe Host keeps five percent of the funds it receives.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("# Fiscal Hosting Agreement")


TERMS = ("These terms govern use of the website example.org. To use the website, you must agree to these terms "
         "with Example Co., the company that runs the website.\n\n# Your Permission to Use the Website\n\n"
         "Subject to these terms, the company gives you permission to use the website.\n\n# Conditions for Use\n\n"
         "You may not break the law using the website.\n")


def test_an_untitled_these_terms_govern_opening_after_other_text_starts_a_document():
    text, part = _after_supply(TERMS)
    assert text[part.start:].startswith("These terms govern")


def test_these_terms_govern_inside_an_agreement_opens_nothing():
    """After the agreement's own clauses the same sentence is a clause of it, not a new document."""
    text = FILLER + SUPPLY.replace("\n\nIN WITNESS", "\n\n" + TERMS + "\nIN WITNESS")
    assert len(_reviewed(text)) == 1


def test_parties_agreeing_as_follows_open_a_document_under_a_covering_letter():
    """"Effective DATE, A ("Consultant") and B agree as follows:" opens the agreement; the letter above is its."""
    doc = ("Dear Ada Fernbank,\n\nWe are glad to offer you a place on the team from 1 March 2025.\n\n"
           "Effective March 1st, 2025, **Ada Fernbank** (\"**Consultant**\") and Fernbank Studio agree as follows:\n\n"
           "Services and Payment\n\nConsultant agrees to complete the Services described in Exhibit A.\n\n"
           "Term\n\nThis Agreement continues until the Services are complete.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("Dear Ada Fernbank")


def test_agreeing_as_follows_after_recitals_opens_nothing():
    doc = SUPPLY.replace("1. Supply.", "WHEREAS, Buyer needs parts (the \"Parts\");\n\nNOW, THEREFORE, in "
                         "consideration of the Parts (the \"Consideration\"), the parties agree as follows:\n\n"
                         "1. Supply.")
    assert len(_reviewed(FILLER + doc)) == 1


def test_a_title_run_into_its_preamble_on_one_line_opens_a_document():
    doc = ("     OUTSOURCING AGREEMENT     This OUTSOURCING AGREEMENT is entered into as of May 1, 2025 by and "
           "between Lumen Labs, LLC (the \"Company\") and Redwater LLC (the \"Contractor\").     RECITALS     "
           "WHEREAS, the Company wishes to retain the Contractor.\n\nARTICLE I DEFINITIONS\n\nSection 1.01 Defined "
           "Terms. Capitalized terms have the meanings given here.\n")
    _after_supply(doc)


def test_a_cover_page_and_table_of_contents_belong_to_the_agreement_after_them():
    doc = ("Exhibit 10.6\n\nLOAN SERVICING AGREEMENT dated as of May 1, 2025 LUMEN LABS, LLC and REDWATER LLC\n\n"
           "TABLE OF CONTENTS\n\nARTICLE I DEFINITIONS 1 Section 1.01 Defined Terms 1 Section 1.02 Accounting Terms 4 "
           "ARTICLE II SERVICING 5 Section 2.01 Appointment 5 Section 2.02 Scope 6\n\n"
           "LOAN SERVICING AGREEMENT\n\nThis Loan Servicing Agreement is entered into as of May 1, 2025 by and between "
           "Lumen Labs, LLC (the \"Company\") and Redwater LLC (the \"Servicer\").\n\nARTICLE I DEFINITIONS\n\n"
           "Section 1.01 Defined Terms. Capitalized terms have the meanings given here.\n")
    text, part = _after_supply(doc)
    assert text[part.start:].startswith("Exhibit 10.6")


def test_a_title_line_right_after_clauses_is_a_heading_of_that_instrument():
    """"# General Terms" straight after a clause ends, with no numbering starting again: a part of these terms."""
    doc = TERMS + ("\n# Disputes\n\nYou and the company will settle disputes by arbitration, and either of you may "
                   "enter the award in any court with jurisdiction.\n\n# General Terms\n\n- You may not assign your "
                   "agreement with the company.\n\n- These terms are the whole agreement between you and the "
                   "company.\n")
    _after_supply(doc)
