"""Copy-constrained decoding: the output must be a verbatim span of the attended pages.

Quotes from a small model drift (paraphrase, repetition). Constraining decoding to
continue a span of the document's own tokens makes every quote real source text;
the model still chooses where the quote starts (a line or sentence start) and
where it ends (by preferring a closing token such as a quote mark or newline).
"""

from __future__ import annotations

__all__ = ["CopyConstraint"]


class CopyConstraint:
    """Tracks the document positions the output so far can be a copy of.

    doc_ids: the document's token ids; pages: attended page indices; page_size P.
    start_ok(i): position i may start a quote; end_ok(j): a quote whose next
    position would be j may end here (e.g. at a sentence end).
    """

    def __init__(self, doc_ids: list[int], pages: list[int], page_size: int, end_ids: set[int],
                 start_ok, end_ok=None, min_tokens: int = 4):
        n = len(doc_ids)
        self.doc = doc_ids
        self.allowed = [(p * page_size, min((p + 1) * page_size, n)) for p in sorted(set(pages))]
        self.end_ids = end_ids
        self.min_tokens = min_tokens
        self.count = 0
        self.end_ok = end_ok or (lambda j: True)
        self.cands = [i for a, b in self.allowed for i in range(max(a, 1), b) if start_ok(i)]
        self._inside = set()
        for a, b in self.allowed:
            self._inside.update(range(a, b))

    def allowed_ids(self) -> list[int]:
        """Sorted token ids the next step may take: continuations of the candidate spans, plus
        the end tokens once the quote is long enough and may end here."""
        ids = {self.doc[i] for i in self.cands}
        if not ids or (self.count >= self.min_tokens and any(self.end_ok(j) for j in self.cands)):
            ids |= self.end_ids
        return sorted(ids)

    def advance(self, token: int) -> bool:
        """Consume a token; False when the quote has ended (end token or no continuation)."""
        if token in self.end_ids and token not in {self.doc[i] for i in self.cands}:
            return False
        self.cands = [i + 1 for i in self.cands if self.doc[i] == token and i + 1 in self._inside]
        self.count += 1
        return bool(self.cands)
