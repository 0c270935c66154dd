"""User-facing configuration (pydantic: anything a user writes is validated here).

Loaded from YAML (``agentctx --config FILE``) or built in Python. Units are in the
field names. Environment settings (``agentctx.common.settings``) provide the defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentctx.common import settings
from agentctx.retrieval.policy import SelectionPolicy
from agentctx.serving.config import EngineConfig, ReplicaConfig

__all__ = ["AgentctxConfig", "ModelConfig", "StoreConfig", "ServeConfig", "load_config"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelConfig(_Strict):
    path: str | None = Field(None, description="Local HF checkpoint dir or .gguf file; None = embedded Gemma 3 270M")
    tokenizer: str | None = Field(
        None, description="Local dir whose tokenizer replaces the model's own (e.g. a tokenizer.json carried beside "
                          "a GGUF file); None = the checkpoint's tokenizer")
    page_size: int = Field(default_factory=settings.page_size, ge=16, le=4096, description="Tokens per KV page")
    prefill_chunk_tokens: int = Field(1024, ge=16, description="Tokens per prefill step (multiple of page_size)")
    max_context_tokens: int = Field(default_factory=settings.max_context_tokens, ge=1, description="Longest document")
    device: str | None = Field(None, description="cpu / cuda / cuda:N; None = cuda when available")
    dtype: str | None = Field(None, description="float32 / bfloat16 / float16; None = bf16 on GPU and on CPUs "
                                 "with bf16 dot products (avx512_bf16 / amx_bf16), else fp32")
    device_cache_bytes: int = Field(8 << 30, ge=0, description="KV bytes a replica keeps on its device")
    query_mode: Literal["auto", "eager", "static", "graph"] = Field(
        "auto", description="Query forwards of the local engine: graph = static shapes replayed as CUDA graphs "
                            "(CUDA only); eager = growing tensors; auto = graph on CUDA, eager on CPU")
    fused_norms: Literal["auto", "on", "off"] = Field(
        "auto", description="RMSNorm modules as one Triton kernel each in the local engine's forwards "
                            "(about half of a query forward's kernel launches); auto = on for CUDA with triton")
    fused_rope: Literal["auto", "on", "off"] = Field(
        "auto", description="Each attention layer's RoPE (q and k) as one Triton kernel in the local engine's "
                            "forwards (instead of ~10 small ones); auto = on for CUDA with triton")
    fused_proj: Literal["auto", "on", "off"] = Field(
        "auto", description="q/k/v and gate/up projections as one matrix product each in the local engine's "
                            "forwards (7 products per layer become 4; no extra memory); auto = on for CUDA")
    decode_batch: int = Field(
        16, ge=1, le=256, description="Most requests the local engine's scheduler runs at once: each step is one "
                                      "forward over their decode rows and prompt chunks; others wait; 1 = one by one")
    decode_gather_ms: float | None = Field(
        None, ge=0, le=1000, deprecated="no longer used: the engine loop holds every running request's next token",
        description="Ignored (the engine loop needs no gather window); accepted so older config files still load")
    step_tokens: int | None = Field(
        None, ge=1, description="Prompt tokens one scheduler step takes when no generation is decoding; "
                                "None = by device (CPU 64, CUDA 256)")
    step_tokens_decoding: int | None = Field(
        None, ge=1, description="Most prompt tokens one step takes while generations decode (bounds how much a "
                                "long prompt slows their next token; the scheduler also keeps such a step within "
                                "1.5x a decode-only step by measured costs); None = by device (CPU 32, CUDA 256)")
    max_step_kv_bytes: int | None = Field(
        4 << 30, ge=1, description="Bound on the KV bytes the running requests read per step (pages attended plus "
                                   "their own tokens); requests beyond it wait; None = no bound")
    engine: Literal["local", "vllm"] = Field(
        "local", description="local = our paged runner (block-selected attention); vllm = vLLM in prompt-level "
                             "mode (selected pages become prompt text, reuse via vLLM prefix caching)")
    vllm_kv_cache_gib: float = Field(4.0, gt=0, description="vLLM CPU KV cache size (VLLM_CPU_KVCACHE_SPACE)")
    vllm_max_model_len: int | None = Field(None, ge=256, description="vLLM max_model_len; None = the model's")
    kv_dtype: Literal["auto", "bf16", "fp8_e4m3", "int8"] = Field(
        "auto", description="What a context's KV pages are stored as in the shared store: auto = the compute "
                            "dtype (unquantised); bf16; fp8_e4m3 / int8 = quantised with float32 scales (half "
                            "the bytes of bf16, dequantised to the compute dtype when a replica loads them; "
                            "fp8 needs torch.float8_e4m3fn); local engine only")

    prefill_checkpoint_s: float | None = Field(
        30.0, ge=0, description="Seconds of prefill between two checkpoints of its pages in the shared store, so a "
                                "prefill cut off by a restart or a killed replica resumes from the last one; "
                                "0 = every prefill chunk; None = off (local engine with a store only)")
    prefill_checkpoint_ttl_s: float = Field(
        6 * 3600.0, gt=0, le=86_400, description="How long an abandoned prefill checkpoint keeps its pages in "
                                                 "the store before they are freed")

    @model_validator(mode="after")
    def _engine_checks(self) -> "ModelConfig":
        self.engine_config()  # the serving layer's own checks (chunk a multiple of the page, dtype)
        return self

    def engine_config(self) -> EngineConfig:
        """What the serving layer builds a replica's engine from."""
        return EngineConfig(
            engine=self.engine, path=self.path, tokenizer=self.tokenizer, page_size=self.page_size,
            prefill_chunk_tokens=self.prefill_chunk_tokens, max_context_tokens=self.max_context_tokens,
            device=self.device, dtype=self.dtype, device_cache_bytes=self.device_cache_bytes,
            query_mode=self.query_mode, fused_norms=self.fused_norms, fused_rope=self.fused_rope,
            fused_proj=self.fused_proj, decode_batch=self.decode_batch,
            step_tokens=self.step_tokens, step_tokens_decoding=self.step_tokens_decoding,
            max_step_kv_bytes=self.max_step_kv_bytes,
            vllm_kv_cache_gib=self.vllm_kv_cache_gib, vllm_max_model_len=self.vllm_max_model_len,
            kv_dtype=self.kv_dtype, prefill_checkpoint_s=self.prefill_checkpoint_s,
            prefill_checkpoint_ttl_s=self.prefill_checkpoint_ttl_s)


class StoreConfig(_Strict):
    redis_url: str | None = Field(default_factory=settings.redis_url, description="None = in-process directory")
    namespace: str = Field("agentctx", min_length=1, description="Ray namespace and Redis key prefix")
    budget_bytes: int = Field(16 << 30, ge=1 << 20, description="Host KV bytes kept before LRU eviction")
    lease_ttl_s: float = Field(30.0, gt=0, description="Holder lease; references of a silent holder expire")


class ServeConfig(_Strict):
    num_replicas: int = Field(1, ge=1, le=64)
    num_gpus_per_replica: float = Field(0.0, ge=0, description="0 = CPU replica; set 1 on GPU nodes")
    max_ongoing_requests: int | None = Field(
        None, ge=1, description="Requests a replica takes at once (running, or waiting in its engine loop); beyond "
                                "it they queue at the caller, then 503; None = twice the model's decode_batch")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_keys: dict[str, str] = Field(default_factory=dict, description="API key -> tenant; empty = auth off")
    max_request_bytes: int = Field(32 << 20, ge=1024)
    max_queued_requests: int = Field(64, ge=-1, description="Per caller, beyond max_ongoing; then 503 (-1 = no cap)")
    retry_after_s: float = Field(1.0, ge=0, description="Retry-After sent with 503 (busy, store outage)")
    max_new_tokens: int = Field(1024, ge=1, description="Largest max_new_tokens / max_tokens one request may ask")
    request_timeout_s: float = Field(300.0, gt=0, description="Model call deadline inside the HTTP ingress; then 504")
    stall_timeout_s: float = Field(
        600.0, gt=0, description="A document's prefill or a context's restore fails only after this long with no "
                                 "progress (no deadline on a slow one); also the deadline of other model calls "
                                 "made by agents and the CLI")
    # 0.8 s: every request is answered (200, or 503 + Retry-After with the rebuild's progress)
    # within ~1 s (issue 29's target; 5 s before), while a short document's restore (0.3 s on
    # the idle 2-core box) still stays invisible; on a loaded box a client following Retry-After
    # asks once more.
    restore_wait_s: float = Field(
        0.8, ge=0, description="How long a request waits for the restore of a context that lost its pages or "
                               "blobs (run in the background) before answering 503 context_restoring with its "
                               "progress; a shorter restore stays invisible")


class AgentctxConfig(_Strict):
    model: ModelConfig = Field(default_factory=ModelConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    # Review default: 8 retrieved pages + 1 sink page + a 256-token recent window. On the
    # bundled 5.5K-token sample that is about half the context; at 32K about 8%, at 1M 0.3%.
    retrieval: SelectionPolicy = Field(default_factory=lambda: SelectionPolicy(top_k_pages=8, recent_tokens=256))
    section_pages: int = Field(16, ge=1, description="Pages per section of the coarse index")
    max_concurrent_agents: int = Field(4, ge=1, description="Agents running at once in a pipeline")

    def replica_config(self) -> ReplicaConfig:
        """What the serving layer deploys the model replicas from."""
        s = self.serve
        return ReplicaConfig(engine=self.model.engine_config(), redis_url=self.store.redis_url,
                             namespace=self.store.namespace, num_replicas=s.num_replicas,
                             num_gpus_per_replica=s.num_gpus_per_replica,
                             max_ongoing_requests=s.max_ongoing_requests or 2 * self.model.decode_batch,
                             max_queued_requests=s.max_queued_requests, retry_after_s=s.retry_after_s)

    @model_validator(mode="after")
    def _policy_page_size(self) -> "AgentctxConfig":
        # The retrieval chunk is the KV page: one page size for both, taken from the model section.
        if self.retrieval.page_size_tokens != self.model.page_size:
            fields = self.retrieval.model_dump(exclude_unset=True)
            fields["page_size_tokens"] = self.model.page_size
            self.retrieval = SelectionPolicy.model_validate(fields)
        return self


def load_config(path: str | Path | None) -> AgentctxConfig:
    """Read a YAML config; a missing file or a bad field fails with the field named."""
    if path is None:
        return AgentctxConfig()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {str(p)!r} not found")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping at the top level")
    return AgentctxConfig.model_validate(data)
