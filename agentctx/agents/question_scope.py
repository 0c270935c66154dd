"""What a question is about: a clause kind of the review taxonomy, a document of a case file.

A question that asks for a clause ("Who may assign the agreement?", "Which law governs?",
"When is payment due?") has an operative sentence, and the review already knows how to find
it (:mod:`.clause_candidates`, docs/REVIEW.md): the QA agent quotes that sentence rather than
whatever passage retrieval ranked first. A question that names one document of a case file
("Under the Supply Agreement, ...") is answered from that document only.

Both are read from the question's words, so a question about anything else ("What does the
sensor log record?") keeps retrieval's candidates.
"""

from __future__ import annotations

import re

from agentctx.retrieval.documents import DocumentPart

__all__ = ["question_kind", "question_document"]

# The words by which a question asks for a kind; the first kind that matches wins, so the
# specific asks come before the broad ones ("terminate" before "term", "liable" before "pay").
_ASKS: tuple[tuple[str, re.Pattern], ...] = tuple((k, re.compile(p, re.I)) for k, p in [
    ("governing_law", r"\b(?:govern(?:s|ed|ing)?\s+(?:law|by)|which\s+law|what\s+law|laws?\s+(?:of|apply|applies)|"
                      r"choice\s+of\s+law|governing\s+law)\b"),
    ("indemnity", r"\bindemni\w*|\bhold\s+harmless\b"),
    ("liability_cap", r"\bliab(?:le|ility|ilities)\b"),
    ("confidentiality", r"\bconfidential\w*|\bnon-?disclosure\b|\bdisclose\b"),
    ("assignment", r"\bassign\w*|\btransfer\s+(?:the|this)\s+agreement\b|\bchange\s+of\s+control\b"),
    ("termination", r"\bterminat\w*|\bcancel\w*\s+(?:the|this)\s+agreement\b|\bend\s+(?:the|this)\s+agreement\b"),
    ("payment", r"\bpay(?:s|ment|able)?\b|\bfees?\b|\binvoice\w*|\bprice\b|\bcost\s+of\s+the\s+service"),
    ("term", r"\bhow\s+long\s+(?:does|will|is)\s+(?:the|this)\s+(?:agreement|contract|licen[cs]e)\b|"
             r"\bterm\s+of\s+(?:the|this)\s+(?:agreement|contract)\b|\b(?:agreement|contract)\s+(?:renew|expire|"
             r"last|run)\w*|\bwhen\s+does\s+(?:the|this)\s+(?:agreement|contract)\s+(?:end|expire)\b|"
             r"\bauto(?:matic(?:ally)?)?[- ]?renew\w*"),
    ("parties", r"\bwho\s+are\s+the\s+parties\b|\bparties\s+to\b|\bwho\s+(?:signed|entered)\b|\bbetween\s+whom\b"),
])
_STOP = frozenset("the a an of and or to for this that agreement terms license licence document contract".split())


def question_kind(question: str) -> str | None:
    """The clause kind a question asks for, or None."""
    for kind, rx in _ASKS:
        if rx.search(question):
            return kind
    return None


def _words(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in _STOP and len(w) > 1}


def question_document(question: str, parts: list[DocumentPart] | tuple[DocumentPart, ...]) -> DocumentPart | None:
    """The document of a case file a question names: the one whose name's distinctive words
    ("Supply", "Design Partner", "msa.txt") the question holds most of, and all of them when the
    name has one or two; None when the text is one document or no name is named."""
    docs = [p for p in parts if p.reviewed]
    if len(docs) < 2:
        return None
    asked = _words(question)
    best, best_share = None, 0.0
    for p in docs:
        name = _words(re.sub(r"\.(?:txt|md|text)$", "", p.name))
        if not name:
            continue
        share = len(name & asked) / len(name)
        if share > best_share and (share == 1.0 or (len(name) > 2 and share >= 0.6)):
            best, best_share = p, share
    return best
