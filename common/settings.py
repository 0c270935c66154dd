"""One home for environment settings: typed getters with an ``AGENTCTX_`` prefix.

Every knob that can come from the environment is read here, with its default
documented beside it, so that nothing else in the package calls ``os.environ``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "cache_dir",
    "redis_url",
    "ray_address",
    "page_size",
    "max_context_tokens",
    "device",
    "embed_backend",
    "embed_device",
    "env_str",
    "env_int",
]


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(f"AGENTCTX_{name}")
    return default if value in (None, "") else value


def env_int(name: str, default: int) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"AGENTCTX_{name} must be an integer, got {value!r}") from exc


def cache_dir() -> Path:
    """AGENTCTX_CACHE_DIR (default ``~/.cache/agentctx``): converted models, embeddings."""
    path = Path(env_str("CACHE_DIR", str(Path.home() / ".cache" / "agentctx"))).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def redis_url() -> str | None:
    """AGENTCTX_REDIS_URL (default unset): the KV directory; unset means in-process directory."""
    return env_str("REDIS_URL")


def ray_address() -> str | None:
    """RAY_ADDRESS (Ray's own variable) selects a cluster; unset starts a local Ray."""
    value = os.environ.get("RAY_ADDRESS")
    return value or None


def page_size() -> int:
    """AGENTCTX_PAGE_SIZE (default 256 tokens): unit of KV storage and of selection."""
    return env_int("PAGE_SIZE", 256)


def max_context_tokens() -> int:
    """AGENTCTX_MAX_CONTEXT_TOKENS (default 1,048,576): longest document accepted."""
    return env_int("MAX_CONTEXT_TOKENS", 1 << 20)


def device() -> str:
    """AGENTCTX_DEVICE (default: cuda when available, else cpu)."""
    value = env_str("DEVICE")
    if value:
        return value
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def embed_backend() -> str:
    """AGENTCTX_EMBED_BACKEND (default ``auto``): the MiniLM encoder, ``auto`` | ``onnx-int8`` |
    ``onnx`` | ``torch``.

    ``auto`` on CPU runs ONNX Runtime with int8 weights when it is installed and agrees with torch
    on a probe, else float32 ONNX, else torch; on a GPU, torch.
    """
    return env_str("EMBED_BACKEND", "auto") or "auto"


def embed_device() -> str:
    """AGENTCTX_EMBED_DEVICE (default: cuda when torch sees a GPU, else cpu): where MiniLM runs.

    Indexing a 1M-token document embeds ~40K passages; a GPU does that in seconds. In a Ray
    actor with no GPU assigned, torch sees none and this is cpu.
    """
    value = env_str("EMBED_DEVICE")
    if value:
        return value
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
