"""Copy-constrained decoding: the output must be a verbatim span of the attended pages.

Quotes from a small model drift (paraphrase, repetition). Constraining decoding to
continue a span of the document's own tokens makes every quote real source text;
the model still chooses where the quote starts (a line or sentence start) and
where it ends (by preferring a closing token such as a quote mark or newline).
"""

from __future__ import annotations

__all__ = ["CopyConstraint", "QuoteVocabulary"]


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


_QUOTE_END_CHARS = ('"', "\n", "\u201d")


class QuoteVocabulary:
    """A tokenizer's token strings, read once, and the copy constraints built from them.

    A quote starts a sentence at a word (not at a clause number or an all-caps heading) and ends
    at a sentence end or a line end; its end tokens are a closing quote mark or a newline."""

    def __init__(self, tokenizer):
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.tokens = [tokenizer.convert_tokens_to_string([t]) if t else "" for t in vocab]
        toks = self.tokens
        self.end_ids = {i for i, t in enumerate(toks) if t and t.strip() != "" and t.lstrip()[:1] in _QUOTE_END_CHARS}
        self.end_ids |= {i for i, t in enumerate(toks) if t and "\n" in t and not t.strip()}

    def constraint(self, doc: list[int], pages: list[int], page_size: int) -> CopyConstraint:
        """A quote of ``doc`` (token ids) from these pages."""
        toks = self.tokens

        def start_ok(i: int) -> bool:
            prev, cur = toks[doc[i - 1]], toks[doc[i]].strip()
            boundary = prev.endswith("\n") or prev.rstrip().endswith((".", ":", ";"))
            heading = len(cur) > 1 and cur.isupper()
            return boundary and cur[:1].isalpha() and not heading and not prev.strip()[:1].isdigit()

        def end_ok(j: int) -> bool:
            return toks[doc[j - 1]].rstrip().endswith((".", ";")) or (j < len(doc) and "\n" in toks[doc[j]])

        return CopyConstraint(doc, pages, page_size, self.end_ids, start_ok, end_ok)
