"""A document's prefill: chunk after chunk into its pages, resumable from a saved state.

``iter_prefill`` runs the model (through ``ModelRunner._hidden`` with a :class:`PrefillStep`, so
the attention hook writes each chunk's keys and values into the document's pages and window) and
yields the DocKV after each chunk: the engine loop interleaves chunks with its decode steps
(serving/engine/local.py). ``prefill_state`` captures what a continuation needs at a page boundary
and ``start=`` puts it back (prefill checkpoints: serving/serve/checkpoint.py).
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from agentctx.serving.runner.attention import PrefillStep
from agentctx.serving.runner.paged_kv import DocKV
from agentctx.serving.types import ContextTooLongError, EmptyInputError, PrefillState

__all__ = ["SLIDING_PREFILL", "iter_prefill", "prefill_state"]

# How a prefill chunk's sliding-window layers attend (the chunk after the previous window):
# "kernel" = the Triton band kernel (kernels/tail_merge.attend_window, first call checked
# against the torch path), "banded" = SDPA band by band, "square" = blockwise fp32 with a
# positional mask over the whole chunk (the reference), "auto" = kernel on CUDA, banded elsewhere.
SLIDING_PREFILL = ("auto", "kernel", "banded", "square")


@torch.inference_mode()
def iter_prefill(runner, token_ids, progress: bool = True, start: PrefillState | None = None):
    """Yield ``runner``'s DocKV of ``token_ids`` after each chunk; complete after the last one.

    ``start``: a state this document's prefill reached before (``prefill_state``, through the
    store): its pages and window are put in place and chunks run from its token on. With the
    same chunk size and unquantised pages the result is bit-identical to an uninterrupted run:
    each chunk reads exactly what it read then."""
    ids = torch.as_tensor(token_ids, dtype=torch.long).view(-1)
    n = ids.numel()
    if n == 0:
        raise EmptyInputError("document is empty: nothing to prefill")
    if n > runner.max_context_tokens:
        raise ContextTooLongError(
            f"document has {n} tokens, over the configured maximum of {runner.max_context_tokens} "
            "(raise AGENTCTX_MAX_CONTEXT_TOKENS or split the document)"
        )
    doc = DocKV.allocate(runner.layout, runner.page_size, n, runner.dtype, runner.device, kv_dtype=runner.kv_quant)
    first = 0 if start is None else _resume(runner, doc, start)
    chunk = runner.prefill_chunk_tokens
    sliding = runner.sliding_prefill
    if sliding not in SLIDING_PREFILL:
        raise ValueError(f"sliding_prefill must be one of {SLIDING_PREFILL}, got {sliding!r}")
    if sliding == "auto":
        sliding = "kernel" if runner.device.type == "cuda" else "banded"
    bar = tqdm(total=n, initial=first, unit="tok", desc="prefill", disable=not progress or n <= 4 * chunk)
    hidden = None
    for begin in range(first, n, chunk):
        end = min(begin + chunk, n)
        pos = torch.arange(begin, end, device=runner.device)
        step = PrefillStep(doc=doc, positions=pos, first_page=begin // runner.page_size, sliding=sliding)
        hidden = runner._hidden(ids[begin:end], pos, step)
        if runner.layout.sliding_layers:
            doc.window_pos = torch.arange(max(0, end - runner.layout.window), end, device=runner.device)
        bar.update(end - begin)
        if end < n:
            yield doc
    bar.close()
    doc.last_logits = runner.logits_from_hidden(hidden[-1:])[0]
    yield doc


def _resume(runner, doc: DocKV, start: PrefillState) -> int:
    """Put a saved state into a freshly allocated DocKV; returns the token to go on from."""
    P, done, layout = runner.page_size, start.num_tokens, runner.layout
    if start.first_page != 0 or done % P or not 0 < done < doc.num_tokens or len(start.pages) != done // P:
        raise ValueError(f"cannot resume a {doc.num_tokens}-token prefill from {done} tokens "
                         f"({len(start.pages)} pages from page {start.first_page}, page size {P})")
    # In the document's own format: a quantised document keeps its scales (DocKV.put_pages).
    doc.put_pages(0, list(start.pages))
    if layout.sliding_layers:
        if start.window is None or start.window.shape[2] != min(layout.window, done):
            raise ValueError(f"resuming at token {done} needs the sliding layers' last "
                             f"{min(layout.window, done)} tokens")
        window = start.window.to(runner.device, runner.dtype)
        doc.window_k = {l: window[j, 0].clone() for j, l in enumerate(layout.sliding_layers)}
        doc.window_v = {l: window[j, 1].clone() for j, l in enumerate(layout.sliding_layers)}
        doc.window_pos = torch.arange(done - window.shape[2], done, device=runner.device)
    return done


def prefill_state(doc: DocKV, done: int, first_page: int = 0) -> PrefillState:
    """The state of a prefill that has computed ``done`` (page-aligned) tokens of ``doc``, on
    the CPU: pages ``[first_page, done / P)`` and the sliding window (copies: later chunks
    write into ``doc``)."""
    if done % doc.page_size:
        raise ValueError(f"a prefill state ends on a page boundary, not at token {done}")
    pages = [doc.page_tensor(i).cpu() for i in range(first_page, done // doc.page_size)]
    window = doc.window_tensor()
    return PrefillState(done, first_page, pages, None if window is None else window.cpu())
