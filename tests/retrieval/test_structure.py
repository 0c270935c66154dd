"""retrieval.structure on real layouts: numbered articles, nested items, Markdown and underlined
headings, ALL-CAPS text, hard wraps, boxes, no headings at all; defined terms and the preamble.

Snippets are copied verbatim from the dev documents (bench/devsets/contracts/) and the bundled
sample; the last tests parse whole dev documents.
"""

from __future__ import annotations

from pathlib import Path

from agentctx.retrieval.structure import parse_structure

ROOT = Path(__file__).resolve().parents[2]
DEVSET = ROOT / "bench" / "devsets" / "contracts"


def _names(st) -> list[tuple[int, str]]:
    return [(s.level, s.name) for s in st.sections]


def _units(st) -> list[str]:
    return [" ".join(st.text[u.start:u.end].split()) for u in st.units]


def test_numbered_articles_nest_their_subclauses_and_quote_without_numbers():
    text = ("MASTER SERVICES AGREEMENT\n\n"
            "This Master Services Agreement is made on September 19, 2022 between Summitbridge Staffing Corp "
            "(\"Client\") and Northgate Catering Ltd (\"Vendor\"), each a \"Party\" and together the \"Parties\".\n\n"
            "ARTICLE 20. DISPUTE RESOLUTION\n"
            "20.1 If escalation fails, either Party may refer the dispute to mediation in Porto.\n"
            "20.2 The Parties shall first attempt to resolve any dispute through their project managers within "
            "ten (10) days.\n\n"
            "ARTICLE 21. GOVERNING LAW\n"
            "21.1 The courts of England and Wales have exclusive jurisdiction to settle any dispute arising from "
            "the applicable Statement of Work.\n"
            "21.4 This Agreement and any non-contractual obligations arising from it are governed by the laws of "
            "the State of New York.\n")
    st = parse_structure(text)
    assert st.title == "MASTER SERVICES AGREEMENT"
    assert _names(st) == [(1, "ARTICLE 20. DISPUTE RESOLUTION"), (2, "20.1"), (2, "20.2"),
                          (1, "ARTICLE 21. GOVERNING LAW"), (2, "21.1"), (2, "21.4")]
    art21 = st.sections[3]
    assert art21.title == "GOVERNING LAW" and art21.number == "21" and art21.end == len(text.rstrip())
    assert [s.parent for s in st.sections] == [None, 0, 0, None, 3, 3]
    # The preamble is the paragraph between the title and the first article; it names the parties.
    pre = text[st.preamble[0]:st.preamble[1]]
    assert pre.startswith("This Master Services Agreement is made") and pre.endswith('the "Parties".')
    # Units are whole sentences without their clause numbers; headings are never units.
    units = _units(st)
    assert units[-1] == ("This Agreement and any non-contractual obligations arising from it are governed by the "
                         "laws of the State of New York.")
    assert not any(u.startswith(("ARTICLE", "21.", "20.")) for u in units)
    last = st.units[-1]
    assert st.section_at(last.start).name == "21.4"
    assert st.heading_path(last.section) == ["GOVERNING LAW"]
    assert {t.term for t in st.terms} >= {"Client", "Vendor", "Party", "Parties"}


def test_nested_letter_number_and_capital_items_of_cc_by():
    text = (DEVSET / "cc_by_4_0.txt").read_text()
    st = parse_structure(text)
    top = [s.name for s in st.sections if s.level == 1]
    assert top[:4] == ["Section 1 \u2013 Definitions", "Section 2 \u2013 Scope", "Section 3 \u2013 License Conditions",
                       "Section 4 \u2013 Sui Generis Database Rights"]
    scope = next(s for s in st.sections if s.name == "Section 2 \u2013 Scope")
    kids = st.children(scope.index)
    assert [k.label for k in kids] == ["a.", "b."]
    a_items = [k.label for k in st.children(kids[0].index)]
    assert a_items == ["1.", "2.", "3.", "4.", "5.", "6."]
    # "c." after "b." and "i." after "h." are letters, not roman numerals: siblings at one level.
    defs = st.children(st.sections[0].index)
    assert [d.label for d in defs] == [f"{c}." for c in "abcdefghijk"]
    assert len({d.level for d in defs}) == 1
    five = next(s for s in st.sections if s.parent == kids[0].index and s.label == "5.")
    assert five.title == "Downstream recipients"
    assert [c.name for c in st.children(five.index)] == ["A. Offer from the Licensor", "B."]
    # "**Licensor** means ..." and the preamble's ("Public License") are defined terms.
    terms = {t.term: t.how for t in st.terms}
    assert terms["Licensor"] == "means" and terms["Public License"] == "inline"


def test_underlined_markdown_like_headings_and_a_box_of_asterisks():
    text = (DEVSET / "mpl_2_0.txt").read_text()
    st = parse_structure(text)
    assert st.title == "Mozilla Public License Version 2.0"
    top = [s.name for s in st.sections if s.level == 1]
    assert top[:5] == ["1. Definitions", "2. License Grants and Conditions", "3. Responsibilities",
                       "4. Inability to Comply Due to Statute or Regulation", "5. Termination"]
    # Sections 6 and 7 sit inside a box of asterisks; they are sections all the same.
    assert "7. Limitation of Liability" in top and "8. Litigation" in top
    seven = next(s for s in st.sections if s.name == "7. Limitation of Liability")
    units = [u for u in st.units if seven.start <= u.start < seven.end]
    first = " ".join(text[units[0].start:units[0].end].replace("*", " ").split())
    assert first.startswith("Under no circumstances and under no legal theory, whether tort (including negligence)")
    assert first.endswith("even if such party shall have been informed of the possibility of such damages.")
    # A cross-reference wrapped to a line start ("2.1 of this License") opens no section.
    assert not any(s.label == "2.1" and s.start > 9000 for s in st.sections)
    assert {"Contributor", "Covered Software", "License"} <= {t.term for t in st.terms}


def test_all_caps_hard_wrapped_paragraph_is_one_sentence_not_line_fragments():
    text = ("3. WARRANTIES; LIMITATION OF LIABILITY\n\n"
            "3.2 Limitation of Liability. GUROBI SHALL NOT BE LIABLE FOR ANY\n"
            "DIRECT, INDIRECT, INCIDENTAL, SPECIAL OR CONSEQUENTIAL DAMAGES\n"
            "(INCLUDING FOR LOSS OF PROFITS, SAVINGS, REVENUE, OR USE, DAMAGED OR\n"
            "LOST FILES OR DATA, OR BUSINESS INTERRUPTION) IN CONNECTION WITH THIS\n"
            "AGREEMENT OR THE PRODUCT, REGARDLESS OF THE CAUSE OF ACTION OR\n"
            "CHARACTERIZATION OF THE DAMAGES, EVEN IF GUROBI HAS BEEN ADVISED OF\n"
            "THE POSSIBILITY OF THESE DAMAGES.\n")
    st = parse_structure(text)
    assert _names(st) == [(1, "3. WARRANTIES; LIMITATION OF LIABILITY"), (2, "3.2 Limitation of Liability")]
    assert _units(st) == ["GUROBI SHALL NOT BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL OR CONSEQUENTIAL "
                          "DAMAGES (INCLUDING FOR LOSS OF PROFITS, SAVINGS, REVENUE, OR USE, DAMAGED OR LOST FILES OR "
                          "DATA, OR BUSINESS INTERRUPTION) IN CONNECTION WITH THIS AGREEMENT OR THE PRODUCT, "
                          "REGARDLESS OF THE CAUSE OF ACTION OR CHARACTERIZATION OF THE DAMAGES, EVEN IF GUROBI HAS "
                          "BEEN ADVISED OF THE POSSIBILITY OF THESE DAMAGES."]


def test_hard_wrapped_numbered_paragraphs_without_titles():
    text = (DEVSET / "python_psf_license.txt").read_text()
    st = parse_structure(text)
    assert st.title == "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" and st.preamble is None
    assert [s.name for s in st.sections] == [f"{i}." for i in range(1, 9)]
    five = st.sections[4]
    units = [u for u in st.units if u.section == five.index]
    assert len(units) == 1  # the wrapped ALL-CAPS limitation is one sentence
    assert " ".join(text[units[0].start:units[0].end].split()).startswith(
        "PSF SHALL NOT BE LIABLE TO LICENSEE OR ANY OTHER USERS OF PYTHON FOR ANY INCIDENTAL")
    assert {t.term for t in st.terms} >= {"PSF", "Licensee"}


def test_no_headings_at_all_makes_one_section_per_paragraph():
    text = (DEVSET / "python_cwi_license.txt").read_text()
    st = parse_structure(text)
    assert [s.style for s in st.sections] == ["para", "para", "para"]
    assert all(s.level == 1 and s.title == "" for s in st.sections)
    last = st.sections[-1]
    assert text[last.start:].startswith("STICHTING MATHEMATISCH CENTRUM DISCLAIMS ALL WARRANTIES")
    assert len([u for u in st.units if u.section == last.index]) == 1


def test_defined_terms_in_their_common_forms():
    text = ('2.6 "Losses" means all losses, damages, costs, fines and reasonable legal fees.\n'
            "Licensee: means the Software user(s) having accepted the Agreement.\n"
            "a. **Licensor** means the individual(s) or entity(ies) granting rights under this Public License.\n"
            '"IBM" - International Business Machines Corporation or one of its subsidiaries.\n'
            "The following agreement regarding Pyarmor is made between Jondy Zhao - referred to as \"licensor\" - "
            "and you.\n")
    st = parse_structure(text)
    assert {t.term for t in st.terms} == {"Losses", "Licensee", "Licensor", "IBM", "licensor"}
    losses = next(t for t in st.terms if t.term == "Losses")
    assert text[losses.start:losses.end].startswith('"Losses" means')


def test_all_caps_article_headings_and_inline_titles_of_real_eulas():
    st = parse_structure((DEVSET / "gurobi_eval_eula.txt").read_text())
    names = [s.name for s in st.sections]
    for want in ["2. SCOPE OF RIGHTS", "2.1. Grant of License", "3.2 Limitation of Liability",
                 "5. TERM AND TERMINATION", "7. GENERAL", "7.1. Assignment", "7.5. Governing Law", "7.5.1"]:
        assert want in names, want
    law = next(s for s in st.sections if s.name == "7.5.1")
    assert st.heading_path(law.index) == ["GENERAL", "Governing Law"]
    st = parse_structure((DEVSET / "nvidia_tensorrt_sla.txt").read_text())
    top = [s.name for s in st.sections if s.level == 1]
    assert top[:8] == ["1. LICENSE", "2. LIMITATIONS", "3. CONFIDENTIALITY", "4. OWNERSHIP", "5. FEEDBACK",
                       "6. NO WARRANTIES", "7. LIMITATION OF LIABILITY", "8. TERM AND TERMINATION"]


def test_spans_are_ordered_and_inside_the_text_on_every_dev_document():
    for path in sorted(DEVSET.glob("*.txt")):
        text = path.read_text()
        st = parse_structure(text)
        assert st.sections and st.units, path.name
        for s in st.sections:
            assert 0 <= s.start <= s.body_start <= s.end <= len(text), (path.name, s)
            if s.parent is not None:
                p = st.sections[s.parent]
                assert p.start < s.start and s.end <= p.end and s.level == p.level + 1, (path.name, s)
        prev = 0
        for u in st.units:
            assert prev <= u.start < u.end <= len(text), path.name
            assert not text[u.start].isspace() and not text[u.end - 1].isspace()
            prev = u.end


def test_markdown_headings_nest_by_their_hashes():
    text = ("# Cloud Services Agreement\n\n"
            "## 5. Fees and Payment\n\n"
            "Customer will pay the Fees within thirty (30) days of the invoice date.\n\n"
            "### 5.1 Late payments\n\n"
            "Late payments accrue interest at 1% per month.\n\n"
            "## 6. Term and Termination\n\n"
            "This Agreement starts on the Effective Date and continues for one year.\n")
    st = parse_structure(text)
    assert [(s.level, s.title) for s in st.sections] == [
        (1, "Cloud Services Agreement"), (2, "5. Fees and Payment"), (3, "5.1 Late payments"),
        (2, "6. Term and Termination")]
    late = next(u for u in st.units if "interest" in text[u.start:u.end])
    assert st.heading_path(late.section) == ["Cloud Services Agreement", "5. Fees and Payment", "5.1 Late payments"]
