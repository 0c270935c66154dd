"""The only text cleaning applied to real texts: line endings and control characters."""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]")


def normalise(text: str) -> str:
    """CRLF/CR to LF; drop control characters (tab and newline kept). No rewrapping."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)
