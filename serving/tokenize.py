"""Document tokenization shared by every engine: BOS + DOC_PREFIX + text, with char offsets."""

from __future__ import annotations

from agentctx.serving.types import DOC_PREFIX, EmptyInputError, TokenizedDoc

__all__ = ["tokenize_document", "empty_document", "render_chat_template", "max_token_bytes", "stop_token_ids"]


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


def empty_document(tokenizer) -> TokenizedDoc:
    """The context of a request without a document: the BOS token alone (EOS for tokenizers
    without one, as Qwen's), no preamble and no placeholder text."""
    tid = getattr(tokenizer, "bos_token_id", None)
    if tid is None:
        tid = getattr(tokenizer, "eos_token_id", None)
    if tid is None:
        raise EmptyInputError("this tokenizer has neither a BOS nor an EOS token to start an empty context")
    return TokenizedDoc(text="", token_ids=[int(tid)], offsets=[(0, 0)], prefix_tokens=1)


def render_chat_template(tokenizer, messages: list[dict]) -> str | None:
    """``messages`` (``{"role", "content"}``) through the tokenizer's chat template, ending with the
    assistant's turn opened; None when the checkpoint has no template. A leading BOS is dropped:
    the context the prompt continues already starts with it."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bos = getattr(tokenizer, "bos_token", None)
    if bos and text.startswith(bos):
        text = text[len(bos):]
    return text


def max_token_bytes(tokenizer) -> int:
    """UTF-8 bytes of the longest text one token stands for (special tokens left out).

    A text of B bytes has at least ``B / max_token_bytes`` tokens, so a document over
    ``max_context_tokens * max_token_bytes`` bytes is too long before anything tokenizes it."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    ids = [i for i in range(len(tokenizer)) if i not in special]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    longest = 1
    for piece in pieces:
        if piece:
            longest = max(longest, len(tokenizer.convert_tokens_to_string([piece]).encode("utf-8")))
    return longest


# Chat/turn end markers of the supported families: a base model may emit them too.
_END_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>")


def stop_token_ids(tokenizer, eos) -> set[int]:
    """Token ids that end generation: the model's EOS id(s) plus the family's turn-end tokens."""
    ids: set[int] = set()
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            ids.add(int(e))
    for name in _END_TOKENS:
        tid = tokenizer.convert_tokens_to_ids(name) if hasattr(tokenizer, "convert_tokens_to_ids") else None
        if isinstance(tid, int) and tid >= 0 and tid != getattr(tokenizer, "unk_token_id", None):
            ids.add(tid)
    return ids
