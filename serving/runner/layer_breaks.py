"""Breaks between the decoder layers of a document prefill chunk, where the engine loop runs its
requests' steps.

On a CPU a prefill chunk of 1,024 tokens takes 1-8 s (more the further into a long document it
is). The engine loop runs a chunk as one job between its steps (serving/engine/loop.py), so a
request that arrived during a chunk waited for the whole of it: while a 60K-token context was
rebuilt, a short query elsewhere took ~2-2.5x its idle time, and a policy that gave requests
more of the time between chunks changed nothing, because the wait for the chunk in hand was
what it paid.

Here each decoder layer but the first gets a forward pre-hook that, only while a break function
is set for the current thread (:func:`layer_breaks`, around a prefill chunk), calls it; the loop's
function runs the steps it owes its requests, then the chunk goes on with its next layer. A chunk
computes exactly what it computes without breaks (the same operations on the same tensors:
the steps in between read and write other documents' KV), so a prefill's pages do not depend on
what ran beside it. The steps inside a break see no break function of their own.

Not where layers hand state to the next one outside the hidden states (the fused sandwich-norm
residual of serving/fusions/sandwich.py, GPU only): there :func:`install_layer_breaks` says no,
and chunks run whole, as on a GPU they take milliseconds anyway.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

__all__ = ["install_layer_breaks", "layer_breaks", "LAYER_BREAK"]

LAYER_BREAK: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "agentctx_layer_break", default=None)


def _break(_module, _args) -> None:
    fn = LAYER_BREAK.get()
    if fn is None:
        return
    token = LAYER_BREAK.set(None)  # the forwards run inside the break take no break of their own
    try:
        fn()
    finally:
        LAYER_BREAK.reset(token)


def install_layer_breaks(model) -> bool:
    """Hook every decoder layer of ``model`` but the first (once per model); False when the model
    has no ``model.layers`` list or its layers hand state over beside the hidden states."""
    done = getattr(model, "_agentctx_layer_breaks", None)
    if done is not None:
        return done
    report = getattr(model, "_agentctx_sandwich_report", None)
    layers = getattr(getattr(model, "model", model), "layers", None)
    ok = layers is not None and len(layers) > 1 and not (report is not None and report.fused)
    if ok:
        for layer in list(layers)[1:]:
            layer.register_forward_pre_hook(_break)
    model._agentctx_layer_breaks = ok
    return ok


@contextlib.contextmanager
def layer_breaks(fn: Callable[[], None] | None) -> Iterator[None]:
    """Within this block (this thread only), forwards call ``fn`` between their layers."""
    token = LAYER_BREAK.set(fn)
    try:
        yield
    finally:
        LAYER_BREAK.reset(token)
