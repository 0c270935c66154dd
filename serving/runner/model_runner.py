"""Our forward pass over a paged KV cache, driving a transformers decoder.

transformers owns the per-family math (embeddings, norms, RoPE, MLP, q/k norms)
for Llama, Qwen2/3 and Gemma 3; we register an attention implementation,
``agentctx_paged``, that replaces what happens between "keys and values after
RoPE" and "attention output". It reads and writes *our* KV state, so the model
never builds its own cache:

* prefill (chunked): each global layer attends to every earlier page (dense)
  plus the chunk itself (causal), then writes the chunk into pages; each sliding
  layer attends to its trailing window plus the chunk and keeps only the window.
* extend (a query and its generated tokens): each global layer attends to the
  pages in the block table (the attend plan) plus the query's own tail; sliding
  layers see the document's window plus the tail. With every page selected this
  is exactly dense attention.

Partials are combined with an exact log-sum-exp merge (kernels.merge).
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import math
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from agentctx.kernels import attend_selected, merge_attention
from agentctx.kernels.positional import full_attention_lse, masked_attention_lse, sliding_window_attention
from agentctx.kernels.tail_merge import attend_window
from agentctx.serving.fusions.norms import FusedNorms, install_norms, norms_active
from agentctx.serving.fusions.proj import FusedProj, install_proj, proj_active
from agentctx.serving.fusions.rope import FusedRope, install_rope, rope_active
from agentctx.serving.model_loader import LoadedModel
from agentctx.serving.runner.batch_slots import BatchSlots, BatchStaticStep, batch_static_attention
from agentctx.serving.runner.greedy_head import GreedyHead
from agentctx.serving.runner.packed_attention import ExtendStep, PackedStep, attend_group
from agentctx.serving.runner.paged_kv import DocKV, LayerLayout, QueryTail
from agentctx.serving.runner.static_query import (
    BUCKETS,
    QuerySlots,
    StaticStep,
    static_attention,
    table_width,
)
from agentctx.serving.tokenize import stop_token_ids
from agentctx.serving.types import ContextTooLongError, EmptyInputError  # noqa: F401 - re-exported

__all__ = ["ModelRunner", "PackedStep", "ExtendStep", "ContextTooLongError", "EmptyInputError", "ATTN_IMPL",
           "QUERY_MODES", "FUSED_NORMS", "FUSED_ROPE", "SLIDING_PREFILL"]

log = logging.getLogger(__name__)
ATTN_IMPL = "agentctx_paged"
# How query forwards run: "eager" (growing tail tensors, any shapes), "static"
# (preallocated slots, static shapes), "graph" (static + CUDA-graph replay; CUDA only),
# "auto" = graph on CUDA, eager elsewhere.
QUERY_MODES = ("auto", "eager", "static", "graph")
# RMSNorm modules as one Triton kernel each during our forwards (serving/fusions/norms.py):
# "auto" = on for CUDA models when triton is installed.
FUSED_NORMS = ("auto", "on", "off")
# Each attention layer's RoPE (q and k) as one Triton kernel during our forwards
# (serving/fusions/rope.py), same settings.
FUSED_ROPE = ("auto", "on", "off")
# q/k/v and gate/up as one matrix product each during our forwards (serving/fusions/proj.py,
# plain PyTorch): "auto" = on for CUDA models (where a forward is launch-bound); "on" anywhere.
FUSED_PROJ = ("auto", "on", "off")
# How a prefill chunk's sliding-window layers attend (the chunk after the previous window):
# "kernel" = the Triton band kernel (kernels/tail_merge.attend_window, first call checked
# against the torch path), "banded" = SDPA band by band, "square" = blockwise fp32 with a
# positional mask over the whole chunk (the reference), "auto" = kernel on CUDA, banded elsewhere.
SLIDING_PREFILL = ("auto", "kernel", "banded", "square")
_MAX_SLOT_SETS = 4  # static slot sets (table widths) kept per document


@dataclass
class PrefillStep:
    doc: DocKV
    positions: torch.Tensor  # (T,) absolute positions of this chunk
    first_page: int  # page index where the chunk starts (chunks are page aligned)
    sliding: str = "banded"  # sliding-layer path: see SLIDING_PREFILL


_STEP: contextvars.ContextVar = contextvars.ContextVar("agentctx_step", default=None)


def _paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention hook. query (B, Hq, T, D), key/value (B, Hkv, T, D) after RoPE.

    B is 1; under a PackedStep the T tokens belong to several rows, attended one by one.
    """
    step = _STEP.get()
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
    # Earlier pages are contiguous and full: a view, not a gather.
    flat_k, flat_v = doc.flat(layer)
    o_prev, l_prev = full_attention_lse(q, flat_k[:n_prev], flat_v[:n_prev], scale, softcap)
    o_loc, l_loc = masked_attention_lse(q, k, v, step.positions, step.positions, scale, softcap=softcap)
    out, _ = merge_attention(o_prev, l_prev, o_loc, l_loc)
    t = k.shape[0]
    flat_k[n_prev : n_prev + t] = k
    flat_v[n_prev : n_prev + t] = v
    return out.to(q.dtype)


def _global_extend(step: ExtendStep, layer, q, k, v, scale, softcap):
    doc, tail = step.doc, step.tail
    if q.device.type == "cpu" and step.block_table.shape[1] == doc.num_pages:
        # Every page on CPU: the pool read in place (dense attention over the document) instead
        # of attend_selected's reference path, which gathers a copy of every page per layer.
        flat_k, flat_v = doc.flat(layer)
        n = doc.num_tokens
        o_pages, l_pages = (x.unsqueeze(0) for x in full_attention_lse(q, flat_k[:n], flat_v[:n], scale, softcap))
    else:
        o_pages, l_pages = attend_selected(
            q.unsqueeze(0),
            doc.k_pages[layer],
            doc.v_pages[layer],
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


def _plain_fp32_cpu_linear(head, hidden: torch.Tensor) -> bool:
    return (type(head) is torch.nn.Linear and hidden.device.type == "cpu" and hidden.dim() == 2
            and hidden.dtype == torch.float32 and head.weight.dtype == torch.float32)


def _cpu_head(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """hidden @ weight.T computed as (weight @ hidden.T).T, with one row sent as two.

    The output head is a CPU decode step's largest read (262K x 640 fp32 = 670 MB for Gemma 3
    270M). On this CPU's MKL, hidden @ weight.T for a few rows runs far below memory speed
    (66 ms for 1 row, 141 ms for 4) while weight @ hidden.T streams the weight (30 ms for 2
    rows, 45 ms for 4); a single row takes the slow matrix-vector path either way, so it is
    sent twice. Same result up to fp32 rounding. bench/experiments/cpu_head.py measures both forms.
    """
    n = hidden.shape[0]
    rows = hidden if n > 1 else hidden.repeat(2, 1)
    out = torch.mm(weight, rows.t()).t()[:n]
    return out if bias is None else out + bias


def _no_mask(*args, **kwargs):
    # Our attention builds its own positional masks; skip transformers' mask tensors.
    return None


AttentionInterface.register(ATTN_IMPL, _paged_attention)
AttentionMaskInterface.register(ATTN_IMPL, _no_mask)


class ModelRunner:
    """Prefill a document into pages once; run queries over selected pages.

    Not thread-safe per instance for concurrent forwards on one query tail; the
    contextvar keeps concurrent forwards on different tails independent.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        page_size: int = 256,
        prefill_chunk_tokens: int = 1024,
        max_context_tokens: int = 1 << 20,
        kernel_impl: str = "auto",
        query_mode: str = "auto",
        static_tail_tokens: int = 2048,
        fused_norms: str = "auto",
        fused_rope: str = "auto",
        fused_proj: str = "auto",
    ):
        if fused_norms not in FUSED_NORMS:
            raise ValueError(f"fused_norms must be one of {FUSED_NORMS}, got {fused_norms!r}")
        if fused_rope not in FUSED_ROPE:
            raise ValueError(f"fused_rope must be one of {FUSED_ROPE}, got {fused_rope!r}")
        if fused_proj not in FUSED_PROJ:
            raise ValueError(f"fused_proj must be one of {FUSED_PROJ}, got {fused_proj!r}")
        if query_mode not in QUERY_MODES:
            raise ValueError(f"query_mode must be one of {QUERY_MODES}, got {query_mode!r}")
        if static_tail_tokens < 2 * BUCKETS[-1]:
            raise ValueError(f"static_tail_tokens must be >= {2 * BUCKETS[-1]}, got {static_tail_tokens}")
        if page_size <= 0 or prefill_chunk_tokens % page_size:
            raise ValueError(
                f"prefill_chunk_tokens ({prefill_chunk_tokens}) must be a positive multiple of page_size ({page_size})"
            )
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.config = self.model.config
        self.layout = LayerLayout.from_config(self.config)
        self.page_size = page_size
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.max_context_tokens = max_context_tokens
        self.kernel_impl = kernel_impl
        # Static forwards attend their slot buffers (global layers: the query's own tokens,
        # merged with the pages; sliding layers: the window band) with one Triton kernel per
        # layer on CUDA (kernels/tail_merge.py); "torch" keeps the plain-PyTorch path. Like
        # fused_norms, set it before the first query: captured graphs keep what they captured.
        self.tail_impl = "torch" if kernel_impl == "torch" else "auto"
        # The sliding layers' window band alone (bench/experiments/profile_step.py times it on and off).
        self.window_impl = self.tail_impl
        self.sliding_prefill = "auto" if kernel_impl != "torch" else "banded"  # see SLIDING_PREFILL
        self.model.config._attn_implementation = ATTN_IMPL
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        if query_mode == "graph" and self.device.type != "cuda":
            raise ValueError(f"query_mode='graph' needs a CUDA model, this one is on {self.device}")
        if query_mode == "auto":
            query_mode = "graph" if self.device.type == "cuda" else "eager"
        self.query_mode = query_mode
        self.static_tail_tokens = static_tail_tokens
        self.norms: FusedNorms | None = self._install_fusion("fused_norms", fused_norms, install_norms,
                                                             "RMSNorm modules")
        self.fused_norms = bool(self.norms and self.norms.fused)
        self.rope: FusedRope | None = self._install_fusion("fused_rope", fused_rope, install_rope,
                                                           "attention layers' RoPE")
        self.fused_rope = bool(self.rope and self.rope.fused)
        self.proj: FusedProj | None = self._install_fusion("fused_proj", fused_proj, install_proj,
                                                           "q/k/v or gate/up projections", triton=False)
        self.fused_proj = bool(self.proj and self.proj.fused)
        # On CPU the output head runs as weight @ hidden.T (see _cpu_head); False = lm_head(hidden).
        self.cpu_head_left = True
        # Eager packed steps attend their one-token rows together per document
        # (serving/runner/packed_attention.py); False = row by row, the reference path.
        self.group_decode_rows = True
        # Greedy rows on a float32 CPU head go through an int8 pass that finds the argmax's few
        # candidates (serving/runner/greedy_head.py; 168 MB more for Gemma 3 270M, built on first use).
        self.cpu_greedy_head = True
        self._greedy_head: GreedyHead | None = None
        # Static decode rows per document and table width, and each row's tail capacity
        # (serving/runner/batch_slots.py; the engine sets the rows to its scheduler's max_rows).
        self.batch_rows = 16
        self.batch_tail_tokens = 1024
        # Decode rows of a document attend the union of their plans, each page read once per step
        # (kernels/union_attend.py); False = each row its own block table (the row-by-row peer).
        self.union_attention = True
        self.union_impl = "torch" if kernel_impl == "torch" else "auto"

    def _install_fusion(self, setting: str, mode: str, install, what: str, triton: bool = True):
        """Install one fusion (fused_norms / fused_rope / fused_proj) per its auto | on | off setting.

        auto: on CUDA (when triton is installed, for the Triton ones), else nothing. on: required;
        nothing fusable is an error, and so are a CPU model or no triton for the Triton ones.
        Returns the install report or None."""
        if mode == "off" or (mode == "auto" and self.device.type != "cuda"):
            return None
        if not triton:
            report = install(self.model, impl="torch")
            if mode == "on" and not report.fused:
                raise ValueError(f"{setting}='on' but no {what} could be fused: {report.skipped}")
            log.info("%s: %d fused", setting, len(report.fused))
            return report
        if self.device.type != "cuda":
            raise ValueError(f"{setting}='on' needs a CUDA model, this one is on {self.device}")
        if importlib.util.find_spec("triton") is None:
            if mode == "on":
                raise ValueError(f"{setting}='on' needs the 'triton' package")
            log.info("triton is not installed: %s run as transformers wrote them", what)
            return None
        report = install(self.model, impl="triton")
        if mode == "on" and not report.fused:
            raise ValueError(f"{setting}='on' but no {what} could be fused: {report.skipped}")
        log.info("%s: %d fused (%s)", setting, len(report.fused), ", ".join(sorted(set(report.fused.values()))))
        return report

    # ------------------------------------------------------------------ helpers
    def _hidden(self, ids: torch.Tensor, positions: torch.Tensor, step) -> torch.Tensor:
        """Hidden states (T, hidden) of one sequence's new tokens."""
        return self._hidden_rows(ids.view(1, -1), positions.view(1, -1), step)[0]

    def _hidden_rows(self, ids: torch.Tensor, positions: torch.Tensor, step) -> torch.Tensor:
        """Hidden states (B, T, hidden); ids and positions (B, T)."""
        token = _STEP.set(step)
        try:
            with norms_active(self.fused_norms), rope_active(self.fused_rope), proj_active(self.fused_proj):
                out = self.model.model(input_ids=ids.to(self.device), position_ids=positions, use_cache=False)
        finally:
            _STEP.reset(token)
        return out.last_hidden_state

    def logits_for(self, hidden_row: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """Logits of only the given token ids, (len(ids),) fp32, for one hidden row.

        Reads len(ids) rows of the output matrix instead of all of it: for the 270M model the
        matrix is 262K x 640 (670 MB in fp32), most of a CPU decode step's memory traffic, and
        copy-constrained steps allow a handful of tokens.
        """
        head = self.model.lm_head
        idx = torch.as_tensor(ids, dtype=torch.long, device=hidden_row.device)
        logits = (head.weight.index_select(0, idx) @ hidden_row).float()
        if getattr(head, "bias", None) is not None:
            logits = logits + head.bias.index_select(0, idx).float()
        return self._final_softcap(logits)

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (T, vocab) fp32 of hidden rows (T, hidden)."""
        head = self.model.lm_head
        if self.cpu_head_left and _plain_fp32_cpu_linear(head, hidden):
            return self._final_softcap(_cpu_head(hidden, head.weight, head.bias))
        return self._final_softcap(head(hidden).float())

    def greedy_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """(T, vocab) fp32 rows whose argmax is that of ``logits_from_hidden(hidden)``: on CPU
        float32 the exact logits of the few tokens an int8 pass cannot rule out, -inf elsewhere
        (serving/runner/greedy_head.py); elsewhere the full logits."""
        head = self.model.lm_head
        if not (self.cpu_greedy_head and _plain_fp32_cpu_linear(head, hidden)):
            return self.logits_from_hidden(hidden)
        if self._greedy_head is None:
            cap = getattr(self.config, "final_logit_softcapping", None)
            self._greedy_head = GreedyHead(head.weight.detach(), None if head.bias is None else head.bias.detach(),
                                           softcap=cap)
        return self._greedy_head.logits(hidden)

    def _final_softcap(self, logits: torch.Tensor) -> torch.Tensor:
        cap = getattr(self.config, "final_logit_softcapping", None)
        return cap * torch.tanh(logits / cap) if cap else logits

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, token_ids, progress: bool = True) -> DocKV:
        """Chunked prefill of a whole document. token_ids: sequence of ints, length N."""
        *_, doc = self.iter_prefill(token_ids, progress)
        return doc

    @torch.inference_mode()
    def iter_prefill(self, token_ids, progress: bool = True):
        """The same prefill, one chunk per iteration (the scheduler interleaves them with its
        steps): yields the DocKV after each chunk; it is complete after the last one."""
        ids = torch.as_tensor(token_ids, dtype=torch.long).view(-1)
        n = ids.numel()
        if n == 0:
            raise EmptyInputError("document is empty: nothing to prefill")
        if n > self.max_context_tokens:
            raise ContextTooLongError(
                f"document has {n} tokens, over the configured maximum of {self.max_context_tokens} "
                "(raise AGENTCTX_MAX_CONTEXT_TOKENS or split the document)"
            )
        doc = DocKV.allocate(self.layout, self.page_size, n, self.dtype, self.device)
        chunk = self.prefill_chunk_tokens
        sliding = self.sliding_prefill
        if sliding not in SLIDING_PREFILL:
            raise ValueError(f"sliding_prefill must be one of {SLIDING_PREFILL}, got {sliding!r}")
        if sliding == "auto":
            sliding = "kernel" if self.device.type == "cuda" else "banded"
        bar = tqdm(total=n, unit="tok", desc="prefill", disable=not progress or n <= 4 * chunk)
        hidden = None
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            pos = torch.arange(start, end, device=self.device)
            step = PrefillStep(doc=doc, positions=pos, first_page=start // self.page_size, sliding=sliding)
            hidden = self._hidden(ids[start:end], pos, step)
            if self.layout.sliding_layers:
                doc.window_pos = torch.arange(max(0, end - self.layout.window), end, device=self.device)
            bar.update(end - start)
            if end < n:
                yield doc
        bar.close()
        doc.last_logits = self.logits_from_hidden(hidden[-1:])[0]
        yield doc

    # ------------------------------------------------------------------ queries
    @staticmethod
    def selected_pages(doc: DocKV, pages: list[int] | None) -> tuple[int, ...]:
        """Sorted distinct page indices (all pages when None); ValueError for any out of range."""
        if pages is None:
            return doc.all_pages
        bad = [p for p in pages if not 0 <= p < doc.num_pages]
        if bad:
            raise ValueError(f"page indices {bad[:5]} out of range for a document of {doc.num_pages} pages")
        return tuple(sorted(set(pages)))

    def block_table(self, doc: DocKV, pages: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, M) int32 table of selected pages (all pages when None) and (1,) count."""
        table = torch.tensor(self.selected_pages(doc, pages), dtype=torch.int32, device=self.device).view(1, -1)
        return table, torch.tensor([table.shape[1]], dtype=torch.int32, device=self.device)

    @torch.inference_mode()
    def extend(
        self, doc: DocKV, tail: QueryTail, token_ids, pages: list[int] | None = None, all_logits: bool = False,
        logit_ids: list[int] | None = None,
    ) -> torch.Tensor:
        """Append tokens to a query's tail, attending to the selected pages.

        Returns logits (vocab,) for the last new token, or (T, vocab) with all_logits, or
        (len(logit_ids),) with logit_ids: only those tokens' logits (see logits_for).
        """
        ids = torch.as_tensor(token_ids, dtype=torch.long).view(-1)
        if ids.numel() == 0:
            raise EmptyInputError("query is empty")
        if logit_ids is not None and (all_logits or len(logit_ids) == 0):
            raise ValueError("logit_ids must be a non-empty list and cannot be combined with all_logits")
        if tail.static is not None or (tail.length == 0 and self.query_mode != "eager"):
            logits = self._extend_static(doc, tail, ids.tolist(), pages, all_logits)
            if logits is not None:
                # The captured forward already computed every logit; pick the asked ones.
                return logits if logit_ids is None else logits[torch.as_tensor(logit_ids, device=logits.device)]
        table, count = self.block_table(doc, pages)
        start = tail.start + tail.length
        pos = torch.arange(start, start + ids.numel(), device=self.device)
        step = ExtendStep(doc, tail, pos, table, count, doc.slot_lens(), self.kernel_impl)
        hidden = self._hidden(ids, pos, step)
        tail.length += ids.numel()
        if all_logits:
            return self.logits_from_hidden(hidden)
        if logit_ids is not None:
            return self.logits_for(hidden[-1], logit_ids)
        return self.logits_from_hidden(hidden[-1:])[0]

    def _extend_static(self, doc: DocKV, tail: QueryTail, ids: list[int], pages, all_logits: bool):
        """The static-slot path of extend; None when this call must run eagerly instead.

        A tail moves to the eager path for good (its slots copied out) when it would outgrow
        its slots or its page set outgrows the block table width.
        """
        sel = self.selected_pages(doc, pages)
        if tail.static is None:
            self.query_slots_for(doc, table_width(len(sel))).bind(tail)
        qs = tail.static.slots
        if tail.length + len(ids) + BUCKETS[-1] > qs.capacity or len(sel) > qs.width:
            qs.materialize(tail)
            return None
        qs.check(tail)
        qs.load_pages(sel)
        return qs.run(tail, ids, all_logits)

    def query_slots_for(self, doc: DocKV, width: int) -> QuerySlots:
        """The document's static query slots for a table width (made on first use; LRU-bounded)."""
        qs = doc.query_slots.pop(width, None)  # re-inserted below: dict order is LRU order
        if qs is None:
            if len(doc.query_slots) >= _MAX_SLOT_SETS:
                doc.query_slots.pop(next(iter(doc.query_slots)))
            qs = QuerySlots(self, doc, width, self.static_tail_tokens)
        doc.query_slots[width] = qs
        return qs

    def long_slots_for(self, doc: DocKV, width: int, tokens: int) -> QuerySlots:
        """Query slots of the document's for one long prompt (``tokens`` in its tail at most), not
        held by another: capacity a power of two >= tokens + the largest bucket, so a few sizes
        (and their graphs) serve every long prompt; made on first use, kept with the document."""
        cap = max(self.static_tail_tokens, 1 << (tokens + BUCKETS[-1] - 1).bit_length())
        pool = doc.long_slots.setdefault((width, cap), [])
        for qs in pool:
            if qs.held_by is None:
                return qs
        qs = QuerySlots(self, doc, width, cap)
        qs.paged_tail = cap % doc.page_size == 0
        pool.append(qs)
        return qs

    def batch_slots_for(self, doc: DocKV, width: int) -> BatchSlots:
        """The document's static decode rows (serving/runner/batch_slots.py): one set under union
        attention, whatever the plans; else one per block-table width."""
        key = "union" if self.union_attention else width
        bs = doc.batch_slots.get(key)
        if bs is None:
            bs = doc.batch_slots[key] = BatchSlots(self, doc, width, self.batch_rows, self.batch_tail_tokens,
                                                   union=self.union_attention)
        return bs

    def new_tail(self, doc: DocKV) -> QueryTail:
        return QueryTail(start=doc.num_tokens)

    def stop_token_ids(self) -> set[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None) or self.config.eos_token_id
        return stop_token_ids(self.tokenizer, eos)

    # ------------------------------------------------------------------ reference
    @torch.inference_mode()
    def reference_logits(self, token_ids, attn_impl: str = "sdpa") -> torch.Tensor:
        """transformers' own forward over the whole sequence: (T, vocab) fp32 logits."""
        ids = torch.as_tensor(token_ids, dtype=torch.long).view(1, -1).to(self.device)
        saved = self.model.config._attn_implementation
        self.model.config._attn_implementation = attn_impl
        try:
            return self.model(input_ids=ids, use_cache=False).logits[0].float()
        finally:
            self.model.config._attn_implementation = saved
