"""The quote of a candidate: the operative sentence, whole, with what completes it.

A quote is the operative sentence extended by the next sentences of the same paragraph that carry the same kind
and by the previous one when it opens with a connective ("However, ..."); a lead-in that ends with a colon
("Either party may terminate this Agreement:") is quoted with the list items that follow it (and with a block that
goes on in lower case after them, the object the items share), and a sentence cut by a line break into two blocks
with its continuation. Never a heading; clause numbers only inside a quoted list. :mod:`.clause_candidates` also
reads a lead-in with its items (:func:`carried_end`) when scoring it.
"""

from __future__ import annotations

import re

from agentctx.agents.clause_lexicon import body_evidence, normalize
from agentctx.agents.clause_operative import operative_adjustment
from agentctx.retrieval.sentences import HTML_TAG, HTML_TAIL
from agentctx.retrieval.structure import DocumentStructure, Unit

__all__ = ["LEAD_IN_END", "carried_end", "quote_span"]

_CONNECTIVE = re.compile(r"^(?:However|Notwithstanding\s+the\s+foregoing|In\s+(?:such|that|this)\s+(?:case|event)|"
                         r"Otherwise|Accordingly|Therefore|Nevertheless|Furthermore|Moreover|Additionally|"
                         r"Such\s+\w+\s+(?:shall|will|may))\b")
_MAX_QUOTE_CHARS = 1200
_MAX_LIST_CHARS = 2000  # a lead-in with its items
# What stands between two units when the second opens a list item: "(a)", "a.", "(ii)", "ii)", "1.", "1.2", "-".
_ITEM_MARK = re.compile(r"^\s*(?:(?:\(?(?:[a-z]{1,2}|[ivxlc]{1,6}|\d{1,3}(?:\.\d{1,3})*)[.)]"
                        r"|[-*\u2022\u2013\u2014])\s*)+$", re.I)
_SENTENCE_END = re.compile(rf"[.!?;:][\"'\u201d\u2019)\]*_]*{HTML_TAIL}\s*$", re.I)
# A lead-in's colon before the closing tags of its HTML list item ("... agrees that:</li>").
LEAD_IN_END = re.compile(rf":[\"'\u201d\u2019)\]*_]*{HTML_TAIL}\s*$", re.I)
_HTML_LIST = re.compile(r"<(/?)(?:ul|ol)\b[^<>\n]*>", re.I)


def _inside(st: DocumentStructure, item: Unit, lead_in: Unit) -> bool:
    """Whether ``item`` belongs to ``lead_in``'s clause: its section or one nested in it (a "4." after
    the lead-in "3. ... if:" and its items "a.", "b." is the next clause, not an item)."""
    if lead_in.section is None or item.section == lead_in.section:
        return True
    return item.section is not None and any(s.index == lead_in.section for s in st.path(item.section))


def carried_end(st: DocumentStructure, unit: Unit, start: int) -> int | None:
    """The end of ``unit`` carried on over the next blocks when it is a lead-in (ends with a
    colon: the list items after it) or a sentence cut by a block boundary (no final
    punctuation: its continuation); None when it is neither."""
    text = st.text
    k = st.units.index(unit)
    lead_in = LEAD_IN_END.search(text[unit.start:unit.end]) is not None
    if not lead_in and _SENTENCE_END.search(text[unit.start:unit.end]):
        return None
    end, in_item, depth = unit.end, False, 0
    for prev, u in zip(st.units[k:], st.units[k + 1:], strict=False):
        gap = text[prev.end:u.start]
        if u.block != prev.block:
            # An HTML list opened after the lead-in ("</li> <li> <ul> <li>(a) ..."): its items, up to its "</ul>".
            depth += sum(-1 if m[1] else 1 for m in _HTML_LIST.finditer(gap))
            html_item = depth > 0 and not HTML_TAG.sub("", gap).strip() \
                and re.match(r"\s*<li\b", text[u.start:u.end], re.I) is not None
            # the list's tail, the object its items share ("(b) disclose to any person ...;" then "any trade
            # secrets or confidential information ..."): a block that goes on in lower case after an item
            tail = in_item and lead_in and text[u.start:u.start + 1].islower()
            if (_ITEM_MARK.match(gap) or html_item or tail) and _inside(st, u, unit):
                in_item = True
            elif not lead_in and u.block == prev.block + 1 and not in_item:
                # a sentence cut in two blocks: take its continuation, then stop at its end
                if u.end - start > _MAX_QUOTE_CHARS:
                    break
                end = u.end
                if _SENTENCE_END.search(text[u.start:u.end]):
                    break
                continue
            else:
                break
        elif not in_item:
            break  # the lead-in's own paragraph goes on: no list follows
        if not lead_in or u.end - start > _MAX_LIST_CHARS:
            break
        end = u.end
    return end if end > unit.end else None


def quote_span(st: DocumentStructure, unit: Unit, kind: str) -> tuple[int, int]:
    """The operative sentence(s) around ``unit``: whole sentences of its paragraph, a lead-in
    with the list items it introduces, a sentence with its continuation in the next block."""
    same = [u for u in st.units if u.block == unit.block]
    i = same.index(unit)
    start, end = unit.start, unit.end
    if i > 0 and _CONNECTIVE.match(st.text[unit.start:unit.end]):
        start = same[i - 1].start
    carried = carried_end(st, unit, start)
    if carried is not None:
        return start, carried
    for u in same[i + 1:i + 3]:
        if u.end - start > _MAX_QUOTE_CHARS:
            break
        sentence = normalize(st.text[u.start:u.end])
        strong, _ = body_evidence(kind, sentence)
        if strong < 1 or operative_adjustment(kind, sentence)[0] < 0:
            break  # not the kind, or a related provision ("In addition, ...", "Upon termination, ...")
        end = u.end
    return start, end
