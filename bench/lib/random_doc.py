"""A document's KV drawn at random, without a prefill: what a decode benchmark needs at sizes whose
prefill would take hours (a 1M-token Llama-3-8B context) or whose float KV would not fit.

Decode attention's cost depends on the bytes it reads, not on their values, so random pages time
it as real ones do. Pages are drawn one layer and ``pages_per_chunk`` pages at a time and written
through ``DocKV.write_chunk``, which quantises them when the runner holds pages quantised
(``model.kv_dtype`` fp8_e4m3 / int8): the document never exists in the compute dtype on the device,
only one chunk of one layer does (256 pages of Llama-3-8B K: 128 MiB in bf16).
"""

from __future__ import annotations

import torch

from agentctx.serving.runner.paged_kv import DocKV

__all__ = ["random_doc"]


@torch.inference_mode()
def random_doc(runner, num_tokens: int, seed: int = 0, pages_per_chunk: int = 256) -> DocKV:
    """Random N(0, 1) keys and values for every global layer (in the runner's page format) and a
    random sliding window; ``last_logits`` and ``token_ids`` stay None (queries bring prompts)."""
    lay, p, dev, dt = runner.layout, runner.page_size, runner.device, runner.dtype
    doc = DocKV.allocate(lay, p, num_tokens, dt, dev, kv_dtype=runner.kv_quant)
    g = torch.Generator(device=dev).manual_seed(seed)
    shape = (lay.num_kv_heads, lay.head_dim)
    for l in lay.global_layers:
        for first in range(0, doc.num_pages, pages_per_chunk):
            t = min(pages_per_chunk * p, num_tokens - first * p)
            k = torch.randn(t, *shape, generator=g, device=dev, dtype=dt)
            v = torch.randn(t, *shape, generator=g, device=dev, dtype=dt)
            doc.write_chunk(l, first, k, v)
    if lay.sliding_layers:
        wt = min(lay.window, num_tokens)
        doc.window_k = {l: torch.randn(wt, *shape, generator=g, device=dev, dtype=dt) for l in lay.sliding_layers}
        doc.window_v = {l: torch.randn(wt, *shape, generator=g, device=dev, dtype=dt) for l in lay.sliding_layers}
        doc.window_pos = torch.arange(num_tokens - wt, num_tokens, device=dev)
    return doc
