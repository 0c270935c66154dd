"""Disk tier: pages and blobs spilled under the cache dir, to survive a Ray restart.

Object-store pages die with the store actor (Ray frees what a dead owner
owned), while the Redis directory survives. Spilling writes each page to
``<root>/pages/<aa>/<sha256(page id)>.kvp`` (content-addressed, so shared
pages are written once) and each blob to ``<root>/blobs/<sha256(cid)>/...``.
A new store actor finds them there and reloads on a miss.

File format: one JSON header line (kind, dtype, shape, data/scale byte counts)
followed by the raw data bytes and optional float32 scales. Writes go to a
temp file then ``os.replace``, so a crash never leaves a half page under the
real name. File names are hashes of the ids, so no id can escape ``root``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .codec import PagePayload

__all__ = ["SpillStore"]

_MAGIC = "agentctx-kvp-1"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class SpillStore:
    """Files of :class:`PagePayload` under one root directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def page_path(self, page_id: str) -> Path:
        d = _digest(page_id)
        return self.root / "pages" / d[:2] / f"{d}.kvp"

    def blob_path(self, context_id: str, name: str) -> Path:
        return self.root / "blobs" / _digest(context_id) / f"{_digest(name)}.kvp"

    # -- generic file io ------------------------------------------------------------
    @staticmethod
    def _write(path: Path, payload: PagePayload) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        scale = payload.scale if payload.scale is not None else np.zeros(0, dtype=np.float32)
        header = json.dumps({"magic": _MAGIC, "kind": payload.kind, "dtype": payload.dtype,
                             "shape": list(payload.shape), "scale_shape": list(payload.scale_shape),
                             "data": int(payload.data.nbytes), "scale": int(scale.nbytes)}).encode() + b"\n"
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(memoryview(np.ascontiguousarray(payload.data)).cast("B"))
                f.write(np.ascontiguousarray(scale, dtype=np.float32).tobytes())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return payload.nbytes

    @staticmethod
    def _read(path: Path) -> PagePayload | None:
        try:
            with open(path, "rb") as f:
                header = json.loads(f.readline())
                if header.get("magic") != _MAGIC:
                    return None
                data = np.frombuffer(f.read(header["data"]), dtype=np.uint8)
                scale_raw = f.read(header["scale"])
        except (FileNotFoundError, ValueError, KeyError):
            return None  # absent or unreadable: treat as not spilled
        if data.nbytes != header["data"] or len(scale_raw) != header["scale"]:
            return None  # truncated file: never hand back a corrupt page
        scale = np.frombuffer(scale_raw, dtype=np.float32) if header["kind"] == "int8" else None
        return PagePayload(header["kind"], header["dtype"], tuple(header["shape"]), data, scale,
                           tuple(header["scale_shape"]))

    # -- pages --------------------------------------------------------------------------
    def has_page(self, page_id: str) -> bool:
        return self.page_path(page_id).exists()

    def write_page(self, page_id: str, payload: PagePayload) -> int:
        """Write unless already there (content-addressed: same id, same bytes); returns bytes written."""
        path = self.page_path(page_id)
        return 0 if path.exists() else self._write(path, payload)

    def read_page(self, page_id: str) -> PagePayload | None:
        return self._read(self.page_path(page_id))

    def remove_page(self, page_id: str) -> None:
        self.page_path(page_id).unlink(missing_ok=True)

    # -- blobs ----------------------------------------------------------------------------
    def write_blob(self, context_id: str, name: str, payload: PagePayload) -> int:
        return self._write(self.blob_path(context_id, name), payload)

    def read_blob(self, context_id: str, name: str) -> PagePayload | None:
        return self._read(self.blob_path(context_id, name))

    def remove_blobs(self, context_id: str) -> None:
        shutil.rmtree(self.root / "blobs" / _digest(context_id), ignore_errors=True)

    # -- accounting ------------------------------------------------------------------------
    def usage(self) -> dict[str, int]:
        pages = nbytes = 0
        base = self.root / "pages"
        if base.exists():
            for path in base.rglob("*.kvp"):
                pages += 1
                nbytes += path.stat().st_size
        return {"pages": pages, "bytes": nbytes}
