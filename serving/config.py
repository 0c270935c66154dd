"""What the serving layer is built from: plain, validated dataclasses (no pydantic, no user config).

The runtime makes them from the user's configuration (``agentctx.config``: ``ModelConfig.engine_config()``,
``AgentctxConfig.replica_config()``); tests and benchmarks construct them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentctx.common import settings

__all__ = ["EngineConfig", "ReplicaConfig", "KV_DTYPES", "check_kv_dtype"]

_DTYPES = (None, "float32", "bfloat16", "float16")
_MODES = ("auto", "on", "off")
#: What pages are stored as in the shared store; "auto" = the compute dtype (unquantised).
KV_DTYPES = ("auto", "bf16", "fp8_e4m3", "int8")


def check_kv_dtype(kv_dtype: str) -> None:
    """ValueError naming what is wrong with a ``kv_dtype`` setting."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    if kv_dtype == "fp8_e4m3":
        import torch  # here, not at the top: the user config loads without torch otherwise

        if hasattr(torch, "float8_e4m3fn"):
            return
        raise ValueError(f"kv_dtype fp8_e4m3 needs torch.float8_e4m3fn, which torch {torch.__version__} lacks "
                         "(torch >= 2.1); use int8 instead")


@dataclass(frozen=True)
class EngineConfig:
    """One replica's engine. See ``agentctx.config.ModelConfig`` for what each field means."""

    engine: str = "local"  # local | vllm
    path: str | None = None  # None = the embedded Gemma 3 270M
    tokenizer: str | None = None
    page_size: int = field(default_factory=settings.page_size)
    prefill_chunk_tokens: int = 1024
    max_context_tokens: int = field(default_factory=settings.max_context_tokens)
    device: str | None = None
    dtype: str | None = None  # float32 | bfloat16 | float16 | None (by device)
    device_cache_bytes: int = 8 << 30
    query_mode: str = "auto"  # auto | eager | static | graph
    fused_norms: str = "auto"
    fused_rope: str = "auto"
    fused_proj: str = "auto"
    decode_batch: int = 16  # requests the engine loop runs at once (serving/engine/scheduler.py)
    step_tokens: int | None = None  # None: by device (serving/engine/local.py STEP_TOKENS)
    step_tokens_decoding: int | None = None
    max_step_kv_bytes: int | None = 4 << 30
    vllm_kv_cache_gib: float = 4.0
    vllm_max_model_len: int | None = None
    kv_dtype: str = "auto"  # auto | bf16 | fp8_e4m3 | int8: pages in the shared store (serve/replica.py)
    # Seconds of prefill between two checkpoints in the store (None: none; 0: every chunk) and how
    # long an abandoned one keeps its pages (serving/serve/checkpoint.py).
    prefill_checkpoint_s: float | None = 30.0
    prefill_checkpoint_ttl_s: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if self.engine not in ("local", "vllm"):
            raise ValueError(f"engine must be local or vllm, got {self.engine!r}")
        if self.page_size < 1 or self.prefill_chunk_tokens % self.page_size:
            raise ValueError(f"prefill_chunk_tokens ({self.prefill_chunk_tokens}) must be a multiple of "
                             f"page_size ({self.page_size})")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.query_mode not in ("auto", "eager", "static", "graph"):
            raise ValueError(f"query_mode must be auto, eager, static or graph, got {self.query_mode!r}")
        for name in ("fused_norms", "fused_rope", "fused_proj"):
            if getattr(self, name) not in _MODES:
                raise ValueError(f"{name} must be auto, on or off, got {getattr(self, name)!r}")
        if self.decode_batch < 1:
            raise ValueError(f"decode_batch must be >= 1, got {self.decode_batch}")
        if any(n is not None and n < 1 for n in (self.step_tokens, self.step_tokens_decoding)):
            raise ValueError("step_tokens and step_tokens_decoding must be >= 1")
        check_kv_dtype(self.kv_dtype)
        if self.prefill_checkpoint_s is not None and self.prefill_checkpoint_s < 0:
            raise ValueError(f"prefill_checkpoint_s must be >= 0 or None, got {self.prefill_checkpoint_s}")
        if not 0 < self.prefill_checkpoint_ttl_s <= 86_400:  # a store lease's range
            raise ValueError(f"prefill_checkpoint_ttl_s must be in (0, 86400], got {self.prefill_checkpoint_ttl_s}")
        if self.kv_dtype != "auto" and self.engine != "local":
            # vLLM's store pages hold token ids, not KV: nothing to quantise.
            raise ValueError(f"kv_dtype {self.kv_dtype} needs engine local (vllm stores token ids, not KV)")


@dataclass(frozen=True)
class ReplicaConfig:
    """A model deployment: its engine, the store it publishes to, and Ray Serve's limits."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    redis_url: str | None = None  # None = the store actor's in-process directory
    namespace: str = "agentctx"
    num_replicas: int = 1
    num_gpus_per_replica: float = 0.0
    max_ongoing_requests: int = 32  # Serve's limit per replica (the runtime sets 2 x decode_batch)
    max_queued_requests: int = 64  # -1 = no cap
    retry_after_s: float = 1.0
