"""The attention of our forward: the ``agentctx_paged`` hook transformers calls in every layer.

transformers owns the per-family math (embeddings, norms, RoPE, MLP, q/k norms); this hook
replaces what happens between "keys and values after RoPE" and "attention output", reading and
writing *our* KV state (serving/runner/paged_kv.py), so the model never builds its own cache.
Which state it reads is the step the runner set for this forward (a contextvar, set by
``ModelRunner._hidden_rows``):

* ``PrefillStep`` (a document chunk): each global layer attends to every earlier page (dense) plus
  the chunk itself (causal), then writes the chunk into pages; each sliding layer attends to its
  trailing window plus the chunk and keeps only the window;
* ``ExtendStep`` / ``PackedStep`` (eager query rows): each global layer attends to the pages of the
  row's plan plus the query's own tail, sliding layers to the document's window plus the tail
  (serving/runner/packed_attention.py for a document's decode rows together);
* ``StaticStep`` / ``BatchStaticStep`` (the static and CUDA-graph paths):
  serving/runner/static_query.py and serving/runner/batch_slots.py.

With every page selected this is exactly dense attention. Partials are combined with an exact
log-sum-exp merge (kernels.merge).
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from agentctx.kernels import attend_selected, merge_attention
from agentctx.kernels.positional import full_attention_lse, masked_attention_lse, sliding_window_attention
from agentctx.kernels.tail_merge import attend_window
from agentctx.serving.runner.batch_slots import BatchStaticStep, batch_static_attention
from agentctx.serving.runner.packed_attention import ExtendStep, PackedStep, attend_group
from agentctx.serving.runner.paged_kv import DocKV
from agentctx.serving.runner.static_query import StaticStep, static_attention

__all__ = ["ATTN_IMPL", "PrefillStep", "STEP"]

ATTN_IMPL = "agentctx_paged"


@dataclass
class PrefillStep:
    doc: DocKV
    positions: torch.Tensor  # (T,) absolute positions of this chunk
    first_page: int  # page index where the chunk starts (chunks are page aligned)
    sliding: str = "banded"  # sliding-layer path: see SLIDING_PREFILL


STEP: contextvars.ContextVar = contextvars.ContextVar("agentctx_step", default=None)


def _paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention hook. query (B, Hq, T, D), key/value (B, Hkv, T, D) after RoPE.

    B is 1; under a PackedStep the T tokens belong to several rows, attended one by one.
    """
    step = STEP.get()
    if step is None:
        raise RuntimeError("agentctx_paged attention called outside ModelRunner")
    layer = module.layer_idx
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    softcap = kwargs.get("softcap") or getattr(module, "attn_logit_softcapping", None)
    if isinstance(step, PackedStep):
        return _packed_attention(step, layer, query, key, value, scale, softcap), None
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (T, H, D)
    if isinstance(step, StaticStep):
        out = static_attention(step, layer, q, k, v, scale, softcap)
    elif isinstance(step, BatchStaticStep):
        out = batch_static_attention(step, layer, q, k, v, scale, softcap)
    elif layer in step.doc.layout.sliding_layers:
        out = _sliding(step, layer, q, k, v, scale, softcap, step.doc.layout.window)
    elif isinstance(step, PrefillStep):
        out = _global_prefill(step, layer, q, k, v, scale, softcap)
    else:
        out = _global_extend(step, layer, q, k, v, scale, softcap)
    return out.unsqueeze(0), None  # (1, T, Hq, D), a view: no extra kernel in graphs


def _packed_attention(step: PackedStep, layer, query, key, value, scale, softcap) -> torch.Tensor:
    """(1, T, Hq, D): decode groups together (serving/runner/packed_attention.py), other rows one by one."""
    grouped = {i for g in step.groups for i in g.rows}
    if not grouped:  # no decode group: each row's span, in order
        outs = [_row_attention(row, layer, query, key, value, s, e, scale, softcap)
                for row, (s, e) in zip(step.rows, step.spans)]
        return torch.cat(outs).unsqueeze(0)
    out = torch.empty(query.shape[2], query.shape[1], query.shape[3], dtype=query.dtype, device=query.device)
    for g in step.groups:
        q, k, v = (x[0].index_select(1, g.tokens).transpose(0, 1) for x in (query, key, value))
        out.index_copy_(0, g.tokens, attend_group(g, step.rows, layer, q, k, v, scale, softcap).to(out.dtype))
    for i, (row, (s, e)) in enumerate(zip(step.rows, step.spans)):
        if i not in grouped:
            out[s:e] = _row_attention(row, layer, query, key, value, s, e, scale, softcap)
    return out.unsqueeze(0)


def _row_attention(row: ExtendStep, layer, query, key, value, s, e, scale, softcap) -> torch.Tensor:
    """One packed row's tokens [s, e) over its own pages and tail: (e - s, Hq, D)."""
    q, k, v = (x[0, :, s:e].transpose(0, 1) for x in (query, key, value))
    if layer in row.doc.layout.sliding_layers:
        return _sliding(row, layer, q, k, v, scale, softcap, row.doc.layout.window)
    return _global_extend(row, layer, q, k, v, scale, softcap)


def _last(parts: list[torch.Tensor], n: int) -> list[torch.Tensor]:
    """Views of the last n entries (dim 0) of the concatenation of parts, without concatenating."""
    out = []
    for t in reversed(parts):
        if n <= 0:
            break
        out.append(t[-n:] if t.shape[0] > n else t)
        n -= t.shape[0]
    return out[::-1]


def _sliding(step, layer, q, k, v, scale, softcap, window):
    doc = step.doc
    wk = doc.window_k.get(layer)
    if isinstance(step, ExtendStep):
        tail = step.tail
        # The new tokens see at most the W - 1 tokens before them: attend only those (a long
        # prompt's later chunks would otherwise read, and copy, its whole tail in every layer).
        keep = window - 1
        prev_k = _last([t for t in (wk, tail.k.get(layer)) if t is not None], keep)
        prev_v = _last([t for t in (doc.window_v.get(layer), tail.v.get(layer)) if t is not None], keep)
        prev_pos = _last([p for p in (doc.window_pos, tail.positions(q.device)) if p is not None], keep)
        keys, vals = torch.cat(prev_k + [k]), torch.cat(prev_v + [v])
        kpos = torch.cat(prev_pos + [step.positions])
        tail.k[layer] = k if layer not in tail.k else torch.cat([tail.k[layer], k])
        tail.v[layer] = v if layer not in tail.v else torch.cat([tail.v[layer], v])
    else:
        keys = k if wk is None else torch.cat([wk, k])
        vals = v if wk is None else torch.cat([doc.window_v[layer], v])
        # Only the last W tokens can ever be seen again by a sliding layer.
        doc.window_k[layer] = keys[-window:].clone()
        doc.window_v[layer] = vals[-window:].clone()
        n_prev = keys.shape[0] - k.shape[0]
        if step.sliding == "kernel":
            # Query i sits at buffer entry n_prev + i; the kernel reads only each row tile's band.
            slots = torch.arange(k.shape[0], device=q.device, dtype=torch.int32)
            return attend_window(q, keys, vals, slots, n_prev, window, scale, softcap, check=False)
        if step.sliding == "banded":
            # Band by band through SDPA: a block of W queries reads 2W - 1 keys, not the chunk.
            q_start = step.first_page * doc.page_size
            return sliding_window_attention(q, keys, vals, q_start, q_start - n_prev, scale, window, softcap)
        kpos = step.positions if wk is None else torch.cat([doc.window_pos, step.positions])
    out, _ = masked_attention_lse(q, keys, vals, step.positions, kpos, scale, window=window, softcap=softcap)
    return out


def _global_prefill(step: PrefillStep, layer, q, k, v, scale, softcap):
    doc, p = step.doc, step.doc.page_size
    n_prev = step.first_page * p
    # Earlier pages are contiguous and full: a view, not a gather (quantised pages: this layer's
    # prefix dequantised; the chunk reads the KV as later queries will).
    prev_k, prev_v = doc.prefix(layer, n_prev)
    o_prev, l_prev = full_attention_lse(q, prev_k, prev_v, scale, softcap)
    o_loc, l_loc = masked_attention_lse(q, k, v, step.positions, step.positions, scale, softcap=softcap)
    out, _ = merge_attention(o_prev, l_prev, o_loc, l_loc)
    doc.write_chunk(layer, step.first_page, k, v)
    return out.to(q.dtype)


def _global_extend(step: ExtendStep, layer, q, k, v, scale, softcap):
    doc, tail = step.doc, step.tail
    if q.device.type == "cpu" and step.block_table.shape[1] == doc.num_pages:
        # Every page on CPU: the pool read in place (dense attention over the document) instead
        # of attend_selected's reference path, which gathers a copy of every page per layer
        # (quantised pages: one float copy of this layer, as that path would make).
        flat_k, flat_v = doc.flat(layer)
        n = doc.num_tokens
        o_pages, l_pages = (x.unsqueeze(0) for x in full_attention_lse(q, flat_k[:n], flat_v[:n], scale, softcap))
    else:
        o_pages, l_pages = attend_selected(
            q.unsqueeze(0),
            *doc.pool(layer),
            step.block_table,
            step.num_blocks,
            step.slot_lens,
            scale,
            softcap=softcap,
            impl=step.kernel_impl,
        )
    tk = k if layer not in tail.k else torch.cat([tail.k[layer], k])
    tv = v if layer not in tail.v else torch.cat([tail.v[layer], v])
    tail.k[layer], tail.v[layer] = tk, tv
    kpos = torch.cat([tail.positions(q.device), step.positions])
    o_loc, l_loc = masked_attention_lse(q, tk, tv, step.positions, kpos, scale, softcap=softcap)
    out, _ = merge_attention(o_pages[0], l_pages[0], o_loc, l_loc)
    return out.to(q.dtype)


def _no_mask(*args, **kwargs):
    # Our attention builds its own positional masks; skip transformers' mask tensors.
    return None




AttentionInterface.register(ATTN_IMPL, _paged_attention)
AttentionMaskInterface.register(ATTN_IMPL, _no_mask)
