"""Physical limits for the session benchmark: measured machine rates and per-figure floors.

Two rates are measured on the device the benchmark runs on:

* memory bandwidth from a large device-to-device copy (bytes read + bytes
  written per second), the rate that bounds every memory-bound phase;
* dense matmul throughput in the model's dtype (bf16 on CUDA, fp32 on CPU),
  the rate that bounds every compute-bound phase.

A *floor* is the time a phase could not beat on this machine even with a
perfect kernel: ``max(FLOPs / matmul rate, bytes moved / bandwidth)``. The
FLOP and byte counts come from the model's shape (:class:`ModelShape`), read
off the instantiated model, so random-weight and real-weight runs of the same
architecture have the same floors.

Counting conventions (per token unless said otherwise):

* linear FLOPs: ``2 x`` the decoder's matrix parameters; the LM head
  (``vocab x hidden``) is counted only where logits are computed (the last
  prefill token, every decode step);
* attention FLOPs: ``4 x Hq x D`` per (query, visible key) pair (QK^T and PV);
  a global layer in a causal prefill of N tokens sees ~N^2/2 pairs, a sliding
  layer at most ``window`` keys per query;
* bytes: all weights a forward reads once (matrix params + LM head, in the
  model dtype) plus the KV it attends to: the selected pages of every global
  layer and the window of every sliding layer.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

__all__ = [
    "MachineRates",
    "ModelShape",
    "measure_rates",
    "measure_copy_bandwidth",
    "measure_matmul_rate",
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device, iters: int) -> float:
    """Seconds per call of ``fn`` (after one untimed call), CUDA events on GPU."""
    fn()
    _sync(device)
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def measure_copy_bandwidth(device: torch.device, nbytes: int | None = None, iters: int | None = None) -> float:
    """Bytes/s moved by ``dst.copy_(src)`` (read + write counted), best of three trials."""
    if nbytes is None:
        nbytes = (2 << 30) if device.type == "cuda" else (256 << 20)
    if iters is None:
        iters = 10 if device.type == "cuda" else 3
    n = nbytes // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device)
    src.fill_(1.0)
    dst = torch.empty_like(src)
    best = min(_timed(lambda: dst.copy_(src), device, iters) for _ in range(3))
    return 2 * n * 2 / best


def measure_matmul_rate(device: torch.device, dtype: torch.dtype, n: int | None = None,
                        iters: int | None = None) -> float:
    """FLOP/s of an n x n x n matmul in ``dtype`` (2 n^3 FLOPs per call), best of three trials."""
    if n is None:
        n = 8192 if device.type == "cuda" else 2048
    if iters is None:
        iters = 20 if device.type == "cuda" else 4
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.float32, generator=g).to(dtype)
    b = torch.randn(n, n, device=device, dtype=torch.float32, generator=g).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    best = min(_timed(lambda: torch.matmul(a, b, out=out), device, iters) for _ in range(3))
    return 2.0 * n**3 / best


@dataclass
class MachineRates:
    device: str
    device_name: str
    copy_bandwidth_Bps: float  # measured, read + write bytes per second
    matmul_flops: float  # measured dense matmul FLOP/s in matmul_dtype
    matmul_dtype: str
    total_memory_bytes: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def floor_s(self, flops: float, nbytes: float) -> float:
        """Roofline floor: the slower of compute at the matmul rate and traffic at the copy bandwidth."""
        return max(flops / self.matmul_flops, nbytes / self.copy_bandwidth_Bps)


def measure_rates(device: torch.device, dtype: torch.dtype) -> MachineRates:
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, total = props.name, int(props.total_memory)
    else:
        import platform

        name, total = f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)", None
    bw = measure_copy_bandwidth(device)
    mm = measure_matmul_rate(device, dtype)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return MachineRates(str(device), name, bw, mm, str(dtype).replace("torch.", ""), total)


@dataclass(frozen=True)
class ModelShape:
    """What the floors need to know about an architecture (read off a model instance)."""

    num_layers: int
    global_layers: int
    sliding_layers: int
    window: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab: int
    matrix_params: int  # decoder-layer weight matrices (excludes embedding table and LM head)
    embed_params: int
    lm_head_params: int
    tied_embeddings: bool
    dtype_bytes: int

    @classmethod
    def from_model(cls, model: torch.nn.Module, layout) -> "ModelShape":
        cfg = model.config
        p0 = next(model.parameters())
        layers = model.model.layers
        matrix = sum(p.numel() for p in layers.parameters() if p.dim() >= 2)
        embed = model.model.embed_tokens.weight
        head = model.lm_head.weight
        return cls(
            num_layers=cfg.num_hidden_layers,
            global_layers=len(layout.global_layers),
            sliding_layers=len(layout.sliding_layers),
            window=int(layout.window or 0),
            hidden=cfg.hidden_size,
            num_heads=cfg.num_attention_heads,
            num_kv_heads=layout.num_kv_heads,
            head_dim=layout.head_dim,
            vocab=head.shape[0],
            matrix_params=int(matrix),
            embed_params=int(embed.numel()),
            lm_head_params=int(head.numel()),
            tied_embeddings=head.data_ptr() == embed.data_ptr(),
            dtype_bytes=p0.element_size(),
        )

    # ---------------------------------------------------------------- sizes
    @property
    def total_params(self) -> int:
        norms = 0  # negligible
        return self.matrix_params + self.embed_params + (0 if self.tied_embeddings else self.lm_head_params) + norms

    @property
    def kv_bytes_per_token(self) -> int:
        """Paged KV bytes per document token (global layers, K and V)."""
        return 2 * self.global_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def window_kv_bytes(self) -> int:
        """KV bytes of all sliding layers' windows (constant in context length)."""
        return 2 * self.sliding_layers * self.window * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes_per_forward(self) -> int:
        """Weights one forward streams from memory: decoder matrices + LM head."""
        return (self.matrix_params + self.lm_head_params) * self.dtype_bytes

    # ---------------------------------------------------------------- FLOPs
    def _pair_flops(self) -> int:
        return 4 * self.num_heads * self.head_dim

    def prefill_flops(self, n: int) -> float:
        """Causal prefill of n tokens, logits for the last token only."""
        lin = 2.0 * self.matrix_params * n + 2.0 * self.lm_head_params
        glob = self.global_layers * self._pair_flops() * n * (n + 1) / 2.0
        w = self.window
        if w and n > w:
            pairs = w * (w + 1) / 2.0 + (n - w) * w
        else:
            pairs = n * (n + 1) / 2.0
        slide = self.sliding_layers * self._pair_flops() * pairs
        return lin + glob + slide

    def extend_flops(self, q_tokens: int, attended: int, logits_tokens: int = 1) -> float:
        """q_tokens new tokens attending to ``attended`` document tokens (+ their own tail)."""
        lin = 2.0 * self.matrix_params * q_tokens + 2.0 * self.lm_head_params * logits_tokens
        glob = self.global_layers * self._pair_flops() * q_tokens * (attended + q_tokens)
        slide = self.sliding_layers * self._pair_flops() * q_tokens * (self.window + q_tokens)
        return lin + glob + slide

    def extend_bytes(self, attended: int) -> float:
        """Bytes a short forward must read: weights + attended pages + sliding windows."""
        return float(self.weight_bytes_per_forward + attended * self.kv_bytes_per_token + self.window_kv_bytes)

    def prefill_bytes(self, n: int) -> float:
        return float(self.weight_bytes_per_forward + n * self.kv_bytes_per_token + self.window_kv_bytes)

    # ---------------------------------------------------------------- floors
    def floors(self, rates: MachineRates, n_ctx: int, q_tokens: int, attended: int) -> dict:
        """Floors (seconds) for one context size and one attended-token count."""
        prefill = rates.floor_s(self.prefill_flops(n_ctx), self.prefill_bytes(n_ctx))
        return {
            "prefill_s": prefill,
            "prefill_tok_s": n_ctx / prefill if prefill > 0 else math.inf,
            "naive_ttft_s": rates.floor_s(self.prefill_flops(n_ctx + q_tokens), self.prefill_bytes(n_ctx + q_tokens)),
            "ttft_s": rates.floor_s(self.extend_flops(q_tokens, attended), self.extend_bytes(attended)),
            "decode_step_s": rates.floor_s(self.extend_flops(1, attended), self.extend_bytes(attended)),
            "decode_attn_s": attended * self.kv_bytes_per_token / rates.copy_bandwidth_Bps,
            "decode_attn_bytes": attended * self.kv_bytes_per_token,
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(total_params=self.total_params, kv_bytes_per_token=self.kv_bytes_per_token,
                 window_kv_bytes=self.window_kv_bytes, weight_bytes_per_forward=self.weight_bytes_per_forward)
        return d
