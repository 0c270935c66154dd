"""Documents inside one text: file headers, agreement openings, titles confirmed by what follows."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

import pytest

from agentctx.retrieval.documents import join_documents, split_documents

ROOT = Path(__file__).resolve().parents[2]
DEV = sorted((ROOT / "bench" / "devsets" / "contracts").glob("*.txt"))

SUPPLY = """SUPPLY AGREEMENT

This Supply Agreement (the "Agreement") is entered into as of March 3, 2025 by and between Northwind
Parts Ltd. ("Supplier") and Harbor Tools Inc. ("Buyer").

1. Supply. Supplier will deliver the Products listed in each purchase order.

2. Payment. Buyer will pay each invoice within 45 days of receipt.

3. Term. This Agreement begins on the Effective Date and lasts two years.

IN WITNESS WHEREOF, the parties have executed this Agreement as of the date first written above.

By: ______________________
"""

AMENDMENT = """AMENDMENT NO. 1 TO SUPPLY AGREEMENT

This Amendment No. 1 (the "Amendment") is made on June 1, 2025 between Northwind Parts Ltd. and Harbor
Tools Inc.

1. Payment. Section 2 of the Agreement is replaced: Buyer will pay each invoice within 30 days.

2. Effect. Except as amended here, the Agreement remains in force.
"""

SERVICES = """Professional Services Terms

1. Services. Consultant will perform the services described in each statement of work.

2. Fees. Client will pay the fees stated in the statement of work within 30 days of invoice.

3. Governing Law. These terms are governed by the laws of the State of Oregon.
"""


def test_file_headers_decide_and_tile_the_text():
    text = join_documents([("supply.txt", SUPPLY), ("amendment.txt", AMENDMENT), ("services.txt", SERVICES)])
    parts = split_documents(text)
    assert [p.name for p in parts] == ["supply.txt", "amendment.txt", "services.txt"]
    assert all(p.how == "header" for p in parts)
    assert parts[0].start == 0 and parts[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))
    assert "Tools Inc." in text[parts[1].start:parts[1].end] and "Oregon" in text[parts[2].start:parts[2].end]


def test_a_case_file_without_headers_is_split_at_each_agreement():
    text = "Case file index\n\n" + SUPPLY + "\n\n" + AMENDMENT + "\n\n" + SERVICES
    parts = split_documents(text)
    assert [p.name for p in parts] == ["SUPPLY AGREEMENT", "AMENDMENT NO. 1 TO SUPPLY AGREEMENT",
                                       "Professional Services Terms"]
    assert parts[0].start == 0  # the index before the first agreement goes with it
    assert text[parts[1].start:].startswith("AMENDMENT NO. 1") and text[parts[2].start:].startswith("Professional")


def test_one_agreement_with_restated_parties_and_an_unnumbered_heading_stays_whole():
    recital = ("\n\nWHEREAS, this Agreement is made between Supplier and Buyer to set out their terms.\n\n"
               "Payment Terms\n\n1. Buyer will pay in euros.\n")
    text = SUPPLY.replace("IN WITNESS", recital + "\nIN WITNESS")
    parts = split_documents(text)
    assert len(parts) == 1 and parts[0].how == "opening" or parts[0].how == "whole"
    assert (parts[0].start, parts[0].end) == (0, len(text))


def test_join_refuses_nothing():
    with pytest.raises(ValueError):
        join_documents([])


@pytest.mark.parametrize("path", DEV, ids=lambda p: p.stem)
def test_each_dev_document_is_one_document(path):
    assert len(split_documents(path.read_text())) == 1


def test_dev_documents_joined_inside_real_filler_come_apart():
    """Real licences with a title (all dev documents but one) inside real technical text (GNU manuals):
    each lands in a part of its own, and no part boundary cuts a document."""
    filler = gzip.open(ROOT / "bench/devsets/selection/sources/gnu-manuals.txt.gz", "rt").read()
    docs = [p.read_text() for p in DEV if p.stem != "python_cwi_license"]  # no title, no preamble: not findable
    rng = random.Random(7)
    for _ in range(6):
        text, spans = "", []
        for doc in rng.sample(docs, 4):
            while True:
                a = rng.randrange(0, len(filler) - 20000)
                chunk = filler[a:a + rng.randrange(1000, 20000)]
                if not re.search(r"licen[cs]e|agreement", chunk, re.I):
                    break
            text += chunk + "\n\n"
            spans.append((len(text), len(text) + len(doc.strip())))
            text += doc.strip() + "\n\n"
        parts = split_documents(text)
        for s, e in spans:
            own = [p for p in parts if p.holds(s + 100)][0]
            assert sum(own.holds(s2 + 100) for s2, _ in spans) == 1
            assert not [p for p in parts if s + 200 < p.start < e - 50]


def test_plain_text_before_the_first_agreement_is_other_text():
    lead = "Build notes for the archive.\n\n" + "The tool reads each input file and prints a summary line.\n\n" * 40
    text = lead + SUPPLY + "\n\n" + SERVICES
    parts = split_documents(text)
    assert [p.how for p in parts] == ["other", "opening", "opening"]
    assert not parts[0].reviewed and parts[1].reviewed
    assert text[parts[1].start:].startswith("SUPPLY AGREEMENT")


def test_documents_are_named_by_their_own_title_not_by_a_generic_heading_or_a_word():
    """A title numbered "1." is named without its number and begins its document (a menu line of
    filler above it stays outside); a generic "Standard Terms" title takes the name the text gives
    itself; both were named "document" and "Standard Terms" before."""
    nda = (ROOT / ".." / "shared" / "devset" / "contracts" / "mutual_nda.txt")
    nda_text = nda.read_text() if nda.exists() else (
        "Standard Terms\n\n1. Introduction. This Mutual Non-Disclosure Agreement (which incorporates these Standard "
        "Terms) allows each party to disclose information.\n\n2. Use. The Receiving Party shall use it only for "
        "the Purpose.\n")
    nvidia = (ROOT / "bench" / "devsets" / "contracts" / "nvidia_cuda_sdk_eula.txt").read_text()
    filler = "* Toolbox introduction\n\nOpening the software toolbox\n\n" + "The tee command copies input.\n\n" * 60
    gurobi = (ROOT / "bench" / "devsets" / "contracts" / "gurobi_eval_eula.txt").read_text()
    text = filler + nvidia + "\n\n" + filler + nda_text + "\n\n" + filler + SUPPLY + "\n\n" + filler + gurobi
    parts = [p for p in split_documents(text) if p.reviewed]
    names = [p.name for p in parts]
    # whose end-user licence it is: the organisation's line above the title
    assert names[3] == "GUROBI OPTIMIZATION, LLC END-USER LICENSE AGREEMENT", names
    assert names[0] == "License Agreement for NVIDIA Software Development Kits", names
    assert text[parts[0].start:].startswith("1. License Agreement for NVIDIA"), text[parts[0].start:][:60]
    assert names[1] == "Mutual Non-Disclosure Agreement (Standard Terms)", names
    assert names[2] == "SUPPLY AGREEMENT", names
    assert "document" not in names
