"""serving.engine.detokenize.TextStream: the same text, ids and stop whether tokens arrive one by one or
in bursts (a greedy decode window's tokens come as one event)."""

from __future__ import annotations

import pytest

from agentctx.serving.engine.detokenize import TextStream


class _Chars:
    """A tokenizer whose token i is the character chr(i)."""

    @staticmethod
    def decode(ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def _ids(s: str) -> list[int]:
    return [ord(c) for c in s]


@pytest.mark.parametrize("burst", [1, 3, 4, 50])
def test_bursts_stop_where_single_tokens_stop(burst):
    ids = _ids("The term is five years. END of it. More text")
    got, deltas = TextStream(_Chars(), ("END",), None), []
    streamed = TextStream(_Chars(), ("END",), deltas.append)
    stopped = False
    for i in range(0, len(ids), burst):
        stopped = got.add(ids[i : i + burst])
        streamed.add(ids[i : i + burst])
        if stopped:
            break
    got.flush()
    streamed.flush()
    assert stopped and got.text == "The term is five years. " and got.stopped
    assert got.ids == _ids("The term is five years. END")  # the ids end with the stop string's last token
    assert "".join(deltas) == got.text


def test_without_stop_strings_a_burst_is_taken_whole():
    t = TextStream(_Chars(), (), None)
    assert not t.add(_ids("abc")) and not t.add(_ids("de"))
    t.flush()
    assert t.text == "abcde" and t.ids == _ids("abcde")
