"""A generation's text as its tokens arrive, on the caller's side of the engine loop.

The loop sends token ids only; each caller (a blocking ``generate``, a stream, the Serve
deployment's event loop) turns them into text here, off the loop's thread: stop strings cut the
text (and end the request), and streamed deltas never end in a possible partial stop string or
an incomplete multi-byte character.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TextStream"]


class TextStream:
    """A generation's text as its tokens arrive: stop strings cut it, and ``on_text`` gets deltas
    that never end in a possible partial stop string or an incomplete multi-byte character.
    Decodes per token only when someone needs it (stop strings or deltas); else once at the end."""

    def __init__(self, tokenizer, stops: tuple[str, ...], on_text: Callable[[str], None] | None):
        self.tok, self.stops, self.on_text = tokenizer, tuple(s for s in stops if s), on_text
        self.live = bool(self.stops) or on_text is not None
        self.ids: list[int] = []
        self.text, self.emitted, self.stopped = "", 0, False
        self._hold = max((len(s) for s in self.stops), default=0)

    def add(self, token_ids) -> bool:
        """Take new tokens; True when a stop string ended the text."""
        if self.stopped:
            return True
        if self.stops and len(token_ids) > 1:
            # A burst (a greedy decode window's tokens): one at a time, so the ids end with the token
            # that completed a stop string, as they do when tokens arrive one by one.
            return any(self.add((t,)) for t in token_ids)
        self.ids.extend(token_ids)
        if not self.live:
            return False
        self.text = self.tok.decode(self.ids, skip_special_tokens=True)
        hits = [i for s in self.stops if (i := self.text.find(s)) >= 0]
        if hits:
            self.text, self.stopped = self.text[: min(hits)], True
            return True
        if self.on_text is not None and len(self.text) > self.emitted:
            safe = min(len(self.text) - self._hold, len(self.text.rstrip("\ufffd")))
            if safe > self.emitted:
                self.on_text(self.text[self.emitted : safe])
                self.emitted = safe
        return False

    def flush(self) -> None:
        """The final text; the rest of it to ``on_text``."""
        if not self.live:
            self.text = self.tok.decode(self.ids, skip_special_tokens=True)
        if self.on_text is not None and len(self.text) > self.emitted:
            self.on_text(self.text[self.emitted :])
            self.emitted = len(self.text)
