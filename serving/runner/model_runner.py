"""Our forward pass over a paged KV cache, driving a transformers decoder (Llama, Qwen2/3, Gemma 3).

The runner prefills a document into pages once (chunked) and runs queries over selected pages:
it sets the step a forward reads (a contextvar) and calls the model, whose attention layers go
through our ``agentctx_paged`` hook (serving/runner/attention.py); it also owns the output head
(the CPU greedy head, logits of a few ids: serving/runner/output_head.py, a base class), the
static query slots and the batched decode rows of each document, and the fusions. With every
page selected a query equals dense attention.
"""

from __future__ import annotations

import importlib.util
import logging

import torch

from agentctx.serving.fusions.norms import FusedNorms, install_norms, norms_active
from agentctx.serving.fusions.proj import FusedProj, install_proj, proj_active
from agentctx.serving.fusions.rope import FusedRope, install_rope, rope_active
from agentctx.serving.fusions.sandwich import FusedSandwich, install_sandwich
from agentctx.serving.model_loader import LoadedModel
from agentctx.serving.runner.attention import ATTN_IMPL, STEP
from agentctx.serving.runner.batch_slots import BatchSlots
from agentctx.serving.runner.greedy_head import GreedyHead
from agentctx.serving.runner.layer_breaks import install_layer_breaks
from agentctx.serving.runner.output_head import OutputHead
from agentctx.serving.runner.packed_attention import ExtendStep, PackedStep
from agentctx.serving.runner.paged_kv import DocKV, LayerLayout, QueryTail
from agentctx.serving.runner.prefill import SLIDING_PREFILL, iter_prefill, prefill_state
from agentctx.serving.runner.quant_kv import device_kv_dtype
from agentctx.serving.runner.static_query import (
    BUCKETS,
    QuerySlots,
    table_width,
)
from agentctx.serving.tokenize import stop_token_ids
from agentctx.serving.types import ContextTooLongError, EmptyInputError, PrefillState  # noqa: F401 - re-exported

__all__ = ["ModelRunner", "PackedStep", "ExtendStep", "ContextTooLongError", "EmptyInputError", "ATTN_IMPL",
           "QUERY_MODES", "FUSED_NORMS", "FUSED_ROPE", "SLIDING_PREFILL"]

log = logging.getLogger(__name__)
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
_MAX_SLOT_SETS = 4  # static slot sets (table widths) kept per document


class ModelRunner(OutputHead):
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
        kv_dtype: str = "auto",
    ):
        """kv_dtype: how documents' pages are held on the device: "auto" / "bf16" in the compute
        dtype, "fp8_e4m3" / "int8" quantised (serving/runner/quant_kv.py), read so by the decode kernels."""
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
        self.kv_dtype = kv_dtype
        self.kv_quant: torch.dtype | None = device_kv_dtype(kv_dtype)  # None: pages in the compute dtype
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
        # Gemma's sandwich-norm layers: their residual steps as one kernel each, under the norms' switch.
        self.sandwich: FusedSandwich | None = install_sandwich(self.model) if self.fused_norms else None
        self.rope: FusedRope | None = self._install_fusion("fused_rope", fused_rope, install_rope,
                                                           "attention layers' RoPE")
        self.fused_rope = bool(self.rope and self.rope.fused)
        self.proj: FusedProj | None = self._install_fusion("fused_proj", fused_proj, install_proj,
                                                           "q/k/v or gate/up projections", triton=False)
        self.fused_proj = bool(self.proj and self.proj.fused)
        # On CPU the output head runs as weight @ hidden.T (see output_head._cpu_head); False = lm_head(hidden).
        self.cpu_head_left = True
        # Eager packed steps attend their one-token rows together per document
        # (serving/runner/packed_attention.py); False = row by row, the reference path.
        self.group_decode_rows = True
        # Greedy rows on a float32 CPU head go through an int8 pass that finds the argmax's few
        # candidates (serving/runner/greedy_head.py; 168 MB more for Gemma 3 270M, built on first use).
        # "auto": the fastest of its backends and the float32 head on this CPU (timed once,
        # output_head._pick_greedy_head); True: always.
        self.cpu_greedy_head: bool | str = "auto"
        self._greedy_heads: dict[str, GreedyHead] = {}  # backend -> head, built on first use
        self._greedy_by_rows: dict[int, str] = {}  # rows rounded up to a power of 2 -> the head's choice
        self._greedy_slow: set[str] = set()
        # Static decode rows per document and table width, and each row's tail capacity
        # (serving/runner/batch_slots.py; the engine sets the rows to its scheduler's max_rows).
        self.batch_rows = 16
        self.batch_tail_tokens = 1024
        # Decode rows of a document attend the union of their plans, each page read once per step
        # (kernels/union_attend.py); False = each row its own block table (the row-by-row peer).
        self.union_attention = True
        self.union_impl = "torch" if kernel_impl == "torch" else "auto"
        # A CPU prefill chunk takes seconds: the engine loop may step its requests between its
        # layers (serving/runner/layer_breaks.py). On a GPU a chunk takes milliseconds.
        self.layer_breaks = self.device.type == "cpu" and install_layer_breaks(self.model)

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
        token = STEP.set(step)
        try:
            with norms_active(self.fused_norms), rope_active(self.fused_rope), proj_active(self.fused_proj):
                out = self.model.model(input_ids=ids.to(self.device), position_ids=positions, use_cache=False)
        finally:
            STEP.reset(token)
        return out.last_hidden_state

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, token_ids, progress: bool = True) -> DocKV:
        """Chunked prefill of a whole document. token_ids: sequence of ints, length N."""
        *_, doc = self.iter_prefill(token_ids, progress)
        return doc

    def iter_prefill(self, token_ids, progress: bool = True, start: PrefillState | None = None):
        """The same prefill, one chunk per iteration (serving/runner/prefill.py)."""
        return iter_prefill(self, token_ids, progress, start)

    prefill_state = staticmethod(prefill_state)

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

    @property
    def kv_storage_dtype(self) -> torch.dtype:
        """The dtype of document page values on the device (what a page read costs per value)."""
        return self.kv_quant or self.dtype

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
