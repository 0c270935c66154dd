"""retrieval.structure on an agreement published as the HTML of a web page: each clause an <li> line, "<ul>" and
"</li>" on lines of their own, article titles in <header> tags. The snippet is synthetic (written for these tests,
not copied from a dev document or a published agreement).
"""

from __future__ import annotations

from agentctx.retrieval.sentences import blocks, html_visible
from agentctx.retrieval.structure import parse_structure
from tests.agents.cited import best_sentence as _best

_HTML = (
    "      <section>\n"
    "        <p>The parties to these \"Harbour Portal Terms\" (the \"Agreement\") are the Harbour Authority "
    "(the \"Authority\") and the Subscriber (as defined below).</p>\n"
    "      </section>\n"
    "      <section>\n"
    "        <header>4. <u>CHARGES AND THE LENGTH OF THIS ARRANGEMENT FOR ALL PORT USERS</u></header>\n"
    "        <ul>\n"
    "          <li><span>4.1</span>The Subscriber will pay to the Authority the charges for each berth booked.</li>\n"
    "          <li><span>4.2</span>The term of this Agreement will run from the first booking until it is "
    "ended under section 4.3.</li>\n"
    "          <li><span>4.3</span>The Authority may terminate this Agreement on written notice if:</li>\n"
    "          <li>\n"
    "            <ul>\n"
    "              <li><span>(a)</span>the Subscriber fails to pay the charges; or</li>\n"
    "              <li><span>(b)</span>the Subscriber breaches the harbour rules.</li>\n"
    "            </ul>\n"
    "          </li>\n"
    "          <li><span>4.4</span>The Subscriber will not, without the prior written consent of the Authority, "
    "assign, either in whole or in part, this Agreement.</li>\n"
    "        </ul>\n"
    "      </section>\n"
)


def test_each_html_list_item_is_a_block_and_tag_lines_separate_them():
    starts = [_HTML[b.start:b.end].split(">", 1)[0] for b in blocks(_HTML)]
    assert "<ul" not in starts and "</li" not in starts and "<li" in starts
    items = [_HTML[b.start:b.end] for b in blocks(_HTML) if _HTML[b.start:b.end].startswith("<li><span>4.")]
    assert len(items) == 4 and all(i.endswith("</li>") for i in items)


def test_a_header_tag_is_the_article_title_without_its_markup():
    names = [s.name for s in parse_structure(_HTML).sections]
    assert "4. CHARGES AND THE LENGTH OF THIS ARRANGEMENT FOR ALL PORT USERS" in names


def test_a_sentence_closed_by_its_tags_is_quoted_alone():
    pay = _best(_HTML, "payment")
    assert pay.endswith("for each berth booked.</li>") and "4.2" not in pay
    assert _best(_HTML, "term").endswith("ended under section 4.3.</li>")


def test_an_html_lead_in_is_quoted_with_its_nested_items_only():
    grounds = _best(_HTML, "termination")
    assert "may terminate this Agreement" in grounds and "breaches the harbour rules" in grounds
    assert "4.4" not in grounds


def test_the_sides_named_as_the_parties_to_the_terms_and_the_consent_before_the_verb():
    assert "The parties to these" in _best(_HTML, "parties")
    assert "will not, without the prior written consent of the Authority, assign" in _best(_HTML, "assignment")


def test_a_licence_placeholder_in_angle_brackets_is_text_not_markup():
    line = "    <program>  Copyright (C) <year>  <name of author>"
    assert html_visible(line) == line
    text = "How to apply these terms:\n" + line + "\n    This program comes with ABSOLUTELY NO WARRANTY.\n"
    assert any(text[b.start:b.end].startswith("<program>") for b in blocks(text))
