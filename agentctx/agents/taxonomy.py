"""The fixed clause taxonomy of the document review: what to look for and how to ask."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClauseKind", "CLAUSE_TAXONOMY", "CLAUSE_KINDS", "check_clause_kinds"]


@dataclass(frozen=True)
class ClauseKind:
    kind: str
    description: str  # completes "Quote the sentence of the document that ..."
    query: str  # retrieval query for the attend plan


CLAUSE_TAXONOMY: dict[str, ClauseKind] = {
    c.kind: c
    for c in [
        ClauseKind("parties", "names the parties to the agreement",
                   "agreement entered into between the parties, company names"),
        ClauseKind("term", "states how long the agreement lasts (its term or duration)",
                   "term of the agreement, commences on effective date and continues for years, renewal"),
        ClauseKind("payment", "states the fees or payment obligations",
                   "fees payable, payment terms, invoices, amount due within days"),
        ClauseKind("termination", "says when or how the agreement may be terminated",
                   "either party may terminate this agreement upon notice, termination for breach"),
        ClauseKind("liability_cap", "limits a party's liability (a cap on damages)",
                   "limitation of liability, aggregate liability shall not exceed, cap on damages"),
        ClauseKind("indemnity", "requires a party to indemnify the other",
                   "shall indemnify, defend and hold harmless against claims, losses"),
        ClauseKind("confidentiality", "protects confidential information",
                   "confidential information shall not be disclosed, non-disclosure obligations"),
        ClauseKind("governing_law", "names the law that governs the agreement",
                   "this agreement shall be governed by the laws of, jurisdiction, courts"),
        ClauseKind("assignment", "restricts assignment or transfer of the agreement",
                   "may not assign or transfer this agreement without prior written consent"),
    ]
}
CLAUSE_KINDS: tuple[str, ...] = tuple(CLAUSE_TAXONOMY)


def check_clause_kinds(kinds) -> tuple[str, ...]:
    """The kinds as a tuple; ValueError naming the unknown ones and the known ones."""
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in CLAUSE_TAXONOMY]
    if bad:
        raise ValueError(f"unknown clause kinds {bad}; known: {', '.join(CLAUSE_KINDS)}")
    return kinds
