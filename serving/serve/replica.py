"""ModelReplica: one engine plus its link to the shared KV store.

This is the body of the Ray Serve deployment (``serving.serve.deployments``) and is also
usable in-process (tests, benchmarks, the GPU bench path without Ray). It

* tokenizes documents with the model's own tokenizer,
* prefills a context once and publishes its pages and sliding-window state to
  the shared store (content-addressed pages, so a shared prefix is stored once),
* serves generation over any context in the store, fetching pages into its
  device cache on first use (no second prefill on another replica).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

import torch

from agentctx.kernels.kv_quant import quantize_pages
from agentctx.kv_store.codec import PagePayload, QuantKVPage, encode_kv_quant
from agentctx.kv_store.hashing import kv_namespace
from agentctx.kv_store.paging import page_char_spans
from agentctx.serving.config import EngineConfig
from agentctx.serving.engine import Engine, LocalEngine
from agentctx.serving.runner.quant_kv import DEVICE_KV_DTYPES
from agentctx.serving.serve.checkpoint import resumable_prefill
from agentctx.serving.serve.restore import TOKENS_BLOB, WINDOW_BLOB, RestoreResult, restore_context
from agentctx.serving.tokenize import empty_document, max_token_bytes, render_chat_template
from agentctx.serving.types import GenerateRequest, GenerateResult, PrefillResult, ScoreRequest, TokenizedDoc

__all__ = ["ModelReplica", "encode_store_pages", "WINDOW_BLOB", "TOKENS_BLOB"]

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# kv_dtype setting -> kernels.kv_quant dtype name, for the quantised store formats.
_QUANT_KV = {"fp8_e4m3": "fp8", "int8": "int8"}


def encode_store_pages(pages: list[torch.Tensor | QuantKVPage], indices: list[int], num_tokens: int,
                       page_size: int, kv_dtype: str, granularity: tuple[str | None, str | None] = (None, None),
                       ) -> list[torch.Tensor | PagePayload]:
    """Pages ``(L_global, 2, P, Hkv, D)`` (page ``indices[j]`` of a ``num_tokens`` document) in the
    store's form for ``kv_dtype``: auto as they are; bf16 cast; fp8_e4m3 / int8 quantised by
    ``kernels.kv_quant`` (``codec.encode_kv_quant``), at its default granularities unless
    ``granularity`` (K, V) names others (fp8: K and V per token and head; int8: K per channel, V
    per token and head), the tokens past a ragged last page kept out of the scales. The global
    layers are kv_quant's slot axis, so a page-level scale covers one layer of one page.

    Pages a device already holds quantised (``QuantKVPage``, serving/runner/quant_kv.py) are
    shipped as they are: their bytes, no dequantise/requantise trip."""
    held = [p for p in pages if isinstance(p, QuantKVPage)]
    if held:
        if len(held) != len(pages) or any(p.data.dtype != DEVICE_KV_DTYPES.get(kv_dtype) for p in held):
            raise ValueError(f"pages quantised as {held[0].data.dtype} cannot be stored as kv_dtype {kv_dtype}")
        return [encode_kv_quant(p.data, p.k_scale, p.v_scale, p.dtype) for p in pages]
    if kv_dtype == "auto":
        return list(pages)
    if kv_dtype == "bf16":
        return [p.to(torch.bfloat16) for p in pages]
    qdtype = _QUANT_KV[kv_dtype]
    out: list[torch.Tensor | PagePayload] = []
    for page, i in zip(pages, indices):
        lens = torch.full((page.shape[0],), min(page_size, num_tokens - i * page_size), dtype=torch.int32)
        k = quantize_pages(page[:, 0], qdtype, granularity[0], part="k", slot_lens=lens)
        v = quantize_pages(page[:, 1], qdtype, granularity[1], part="v", slot_lens=lens)
        out.append(encode_kv_quant(torch.stack([k.data, v.data], dim=1), k.scale, v.scale, page.dtype))
    return out


def build_engine(m: EngineConfig) -> Engine:
    """The engine a replica runs."""
    if m.engine == "vllm":
        from agentctx.serving.vllm_engine import VLLMEngine

        return VLLMEngine(m.path, page_size=m.page_size, max_context_tokens=m.max_context_tokens, dtype=m.dtype,
                          kv_cache_gib=m.vllm_kv_cache_gib, max_model_len=m.vllm_max_model_len,
                          tokenizer=m.tokenizer)
    return LocalEngine(
        m.path,
        tokenizer=m.tokenizer,
        page_size=m.page_size,
        prefill_chunk_tokens=m.prefill_chunk_tokens,
        max_context_tokens=m.max_context_tokens,
        device=m.device,
        dtype=_DTYPES.get(m.dtype) if m.dtype else None,
        device_cache_bytes=m.device_cache_bytes,
        query_mode=m.query_mode,
        fused_norms=m.fused_norms,
        fused_rope=m.fused_rope,
        fused_proj=m.fused_proj,
        decode_batch=m.decode_batch,
        step_tokens=m.step_tokens,
        step_tokens_decoding=m.step_tokens_decoding,
        max_step_kv_bytes=m.max_step_kv_bytes,
        kv_dtype=m.kv_dtype,
    )


class ModelReplica:
    """Engine + store. ``store`` may be None for a store-less, single-process replica."""

    def __init__(self, config: EngineConfig | None = None, store=None, engine: Engine | None = None):
        cfg = config or EngineConfig()
        self.config = cfg
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.store = store
        self.engine = engine or build_engine(cfg)
        if self.engine.page_size != cfg.page_size:
            raise ValueError(f"engine page size {self.engine.page_size} != configured {cfg.page_size}")
        self.engine.page_loader = self._load_pages if store is not None else None
        self.metrics = {"requests": 0, "generated_tokens": 0, "pages_attended": 0, "ttft_s_sum": 0.0, "errors": 0,
                        "checkpoint_saves": 0, "checkpoint_s_sum": 0.0}
        self._max_token_bytes: int | None = None

    # ------------------------------------------------------------------ info
    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def info(self) -> dict:
        return {
            "replica": self.name,
            "model_id": self.model_id,
            "page_size": self.engine.page_size,
            "max_token_bytes": self.max_token_bytes,
            "chat_template": bool(getattr(self.engine.tokenizer, "chat_template", None)),
            **self.engine.describe(),
            **self.engine.stats,
            **self.metrics,
        }

    @property
    def max_token_bytes(self) -> int:
        """Bytes of the longest token's text: what bounds a document's bytes by its token limit."""
        if self._max_token_bytes is None:
            self._max_token_bytes = max_token_bytes(self.engine.tokenizer)
        return self._max_token_bytes

    @property
    def page_namespace(self) -> str:
        """What this replica's store pages are hashed under: the engine's namespace plus the stored
        KV dtype (``kv_store.hashing.kv_namespace``; unchanged for ``kv_dtype`` auto)."""
        return kv_namespace(self.engine.page_namespace, self.config.kv_dtype)

    def store_pages(self, pages: list[torch.Tensor], indices: list[int], num_tokens: int
                    ) -> list[torch.Tensor | PagePayload]:
        """Pages in the store's form for this replica's ``kv_dtype`` (see :func:`encode_store_pages`)."""
        return encode_store_pages(pages, indices, num_tokens, self.engine.page_size, self.config.kv_dtype)

    def holds(self, context_id: str) -> bool:
        return self.engine.holds(context_id)

    def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc:
        """The document as the model sees it; ``allow_empty``: ``""`` is the no-document context
        (the BOS token alone: a chat without a document sees no placeholder text)."""
        if allow_empty and text == "":
            return empty_document(self.engine.tokenizer)
        return self.engine.tokenize_document(text)

    def render_chat(self, messages: list[dict]) -> str | None:
        """Chat messages through the checkpoint's chat template (None when it has none)."""
        return render_chat_template(self.engine.tokenizer, messages)

    def restore_context(self, context_id: str, tenant: str, text: str | None = None, on_chunk=None) -> RestoreResult:
        """Put back a stored context's missing pages and blobs (see ``serving/serve/restore.py``)."""
        return restore_context(self, context_id, tenant, text, on_chunk)

    # ------------------------------------------------------------------ prefill
    def prefill_context(
        self, context_id: str, tenant: str, doc: TokenizedDoc, progress: bool = True, extra: dict | None = None,
        on_chunk=None,
    ) -> PrefillResult:
        """Prefill once and publish pages + directory entry; idempotent for an existing context."""
        if self.store is None:
            return self.engine.prefill(context_id, doc, progress=progress, on_chunk=on_chunk)
        from agentctx.kv_store import ContextNotFoundError, ContextRecord

        try:
            rec = self.store.get_record(context_id, tenant)
            return PrefillResult(context_id, rec.num_tokens, len(rec.page_ids), self.engine.page_size, 0, 0.0,
                                 reused_pages=len(rec.page_ids))
        except ContextNotFoundError:
            pass
        P = self.engine.page_size
        ids = doc.token_ids
        token_pages = [ids[i : i + P] for i in range(0, len(ids), P)]
        page_ids = self.store.page_hashes(self.page_namespace, tenant, token_pages)
        reused = sum(self.store.has_pages(page_ids))
        # From the last checkpoint of this document when one is left (serving/serve/checkpoint.py).
        result, checkpoint = resumable_prefill(self, context_id, tenant, doc, progress, on_chunk)
        num_tokens, pages, window = self.engine.export(context_id)
        # The window blob (sliding layers, at most W tokens) stays in the compute dtype.
        pages = self.store_pages(pages, list(range(len(pages))), num_tokens)
        self.store.put_pages(page_ids, pages)
        record = ContextRecord(
            context_id=context_id,
            tenant=tenant,
            model_id=self.model_id,
            dtype=self.engine.describe()["dtype"],
            page_ids=page_ids,
            token_spans=[(i, min(i + P, num_tokens)) for i in range(0, num_tokens, P)],
            char_spans=page_char_spans(doc.offsets, P),
            num_tokens=num_tokens,
            extra=dict(extra or {}, page_size=P, prefix_tokens=doc.prefix_tokens,
                       **({} if self.config.kv_dtype == "auto" else {"kv_dtype": self.config.kv_dtype})),
        )
        from agentctx.kv_store import PagesMissingError

        try:
            self.store.create_context(record)
        except PagesMissingError as exc:
            # put_pages skips pages already stored (a shared prefix); under budget pressure such a
            # page can be evicted before create_context references it: put those again, once.
            where = {p: i for i, p in enumerate(page_ids)}
            self.store.put_pages(exc.page_ids, [pages[where[p]] for p in exc.page_ids])
            self.store.create_context(record)
        # blobs attach to a live context; the text goes to the directory too (it outlives the store actor)
        self.store.put_document(context_id, doc.text, tenant)
        self.store.put_blob(context_id, TOKENS_BLOB, torch.tensor(doc.token_ids, dtype=torch.int64), tenant=tenant)
        if window is not None:
            self.store.put_blob(context_id, WINDOW_BLOB, window, tenant=tenant)
        if checkpoint is not None:
            checkpoint.discard()
        return PrefillResult(context_id, result.num_tokens, result.num_pages, P, result.kv_bytes, result.prefill_s,
                             reused_pages=reused, resumed_tokens=result.resumed_tokens)

    def _load_pages(self, context_id: str, tenant: str):
        """page_loader for the engine: copy a context's pages out of the shared store."""
        t0 = time.perf_counter()
        with self.store.open(context_id, tenant, holder_id=f"replica-load-{self.name}") as handle:
            rec = handle.record
            # A device that holds pages quantised takes stored quantised pages as they are (QuantKVPage).
            pages = handle.get_pages(rec.page_ids, quantized=self.engine.pages_quantized)
            window = None
            if self.engine.needs_window:
                window = self.store.get_blob(context_id, WINDOW_BLOB, tenant=tenant)
            token_ids = self.store.get_blob(context_id, TOKENS_BLOB, tenant=tenant).tolist()
        # Quantised pages come back dequantised to the publisher's compute dtype, bf16 pages as
        # bf16: the engine gets its own (a no-op, not a copy, for pages already in it).
        dtype = getattr(getattr(self.engine, "runner", None), "dtype", None)
        if dtype is not None:
            pages = [p if isinstance(p, QuantKVPage) else p.to(dtype) for p in pages]
        log.info("replica %s loaded %s (%d pages) in %.3f s", self.name, context_id, len(pages),
                 time.perf_counter() - t0)
        return rec.num_tokens, pages, window, token_ids

    # ------------------------------------------------------------------ generation
    def _done(self, res: GenerateResult) -> GenerateResult:
        res.replica = self.name
        self.metrics["generated_tokens"] += len(res.token_ids)
        self.metrics["pages_attended"] += res.pages_attended
        self.metrics["ttft_s_sum"] += res.ttft_s
        return res

    def generate(self, req: GenerateRequest) -> GenerateResult:
        self.metrics["requests"] += 1
        try:
            return self._done(self.engine.generate(req))
        except Exception:
            self.metrics["errors"] += 1
            raise

    def score(self, req: ScoreRequest) -> list[float]:
        self.metrics["requests"] += 1
        return self.engine.score(req)

    def stream(self, req: GenerateRequest):
        """Yield text deltas (sync generator; Serve streams it with handle.options(stream=True))."""
        self.metrics["requests"] += 1
        yield from self.engine.stream(req)

    # The Serve deployment's entry points: the engine's own async API, no thread per request.
    async def agenerate(self, req: GenerateRequest) -> GenerateResult:
        self.metrics["requests"] += 1
        try:
            return self._done(await self.engine.agenerate(req))
        except Exception:
            self.metrics["errors"] += 1
            raise

    async def ascore(self, req: ScoreRequest) -> list[float]:
        self.metrics["requests"] += 1
        return await self.engine.ascore(req)

    async def astream_events(self, req: GenerateRequest):
        """``("delta", text)``..., then ``("result", GenerateResult)``."""
        self.metrics["requests"] += 1
        try:
            async for kind, value in self.engine.astream_events(req):
                yield kind, self._done(value) if kind == "result" else value
        except Exception:
            self.metrics["errors"] += 1
            raise

    def drop_context(self, context_id: str) -> bool:
        return self.engine.drop(context_id)
