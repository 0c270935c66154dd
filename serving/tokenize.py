"""Document tokenization shared by every engine: BOS + DOC_PREFIX + text, with char offsets."""

from __future__ import annotations

from serving.types import DOC_PREFIX, EmptyInputError, TokenizedDoc

__all__ = ["tokenize_document", "EmptyInputError"]


def tokenize_document(tokenizer, text: str) -> TokenizedDoc:
    """Tokenize a document behind the shared preamble; offsets index into ``text`` itself."""
    if not text or not text.strip():
        raise EmptyInputError("document is empty")
    full = DOC_PREFIX + text
    enc = tokenizer(full, return_offsets_mapping=True, add_special_tokens=True)
    shift = len(DOC_PREFIX)
    offsets = [(max(0, s - shift), max(0, e - shift)) for s, e in enc["offset_mapping"]]
    n_prefix = len(tokenizer(DOC_PREFIX, add_special_tokens=True)["input_ids"])
    return TokenizedDoc(text=text, token_ids=list(enc["input_ids"]), offsets=offsets, prefix_tokens=n_prefix)
