"""The document blob of a context: its text and the tokenizer's offsets, stored beside its pages.

Written once when a context is loaded; read back to rebuild a retrieval index, to give an
agent the text, or to re-prefill evicted pages.
"""

from __future__ import annotations

import json

__all__ = ["DOC_BLOB", "encode_doc_blob", "decode_doc_blob"]

DOC_BLOB = "document"


def encode_doc_blob(text: str, offsets: list[tuple[int, int]]) -> bytes:
    """The document text and token offsets as one blob (what an index rebuild needs)."""
    return json.dumps({"text": text, "offsets": [list(o) for o in offsets]}).encode()


def decode_doc_blob(data: bytes) -> tuple[str, list[tuple[int, int]]]:
    obj = json.loads(bytes(data).decode())
    return obj["text"], [tuple(o) for o in obj["offsets"]]
