"""How a page tensor is stored in the Ray object store: raw bytes + dtype + shape.

Ray pickles a ``torch.Tensor`` by copying its storage, so every ``ray.get``
would allocate a private copy in the reader — N agents, N copies. A numpy
``uint8`` array, by contrast, is stored out-of-band and ``ray.get`` returns a
read-only view straight into shared memory. So pages travel as
:class:`PagePayload` (numpy bytes + metadata) and :func:`decode_payload`
rebuilds a tensor over that same memory without copying.

Tensors returned by ``decode_payload(copy=False)`` alias shared memory: treat
them as read-only (``.clone()`` before writing in place).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .errors import InvalidInputError
from .quant import QuantizedPage, dequantize_page, quantize_page

__all__ = ["PagePayload", "encode_tensor", "decode_payload", "encode_bytes", "dtype_name", "dtype_from_name"]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidInputError(f"unknown torch dtype {name!r}")
    return dtype


@dataclass
class PagePayload:
    """One stored page (or tensor blob): ``kind`` is "raw", "int8" (quantized) or "bytes"."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray  # uint8, 1-d
    scale: np.ndarray | None = None  # float32 scales for kind "int8"
    scale_shape: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + (self.scale.nbytes if self.scale is not None else 0))


def _as_bytes(t: torch.Tensor) -> np.ndarray:
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.zeros(0, dtype=np.uint8)


def encode_tensor(t: torch.Tensor, quantize: bool = False) -> PagePayload:
    """Tensor -> payload. ``quantize=True`` stores floating pages as int8 + per-head scales."""
    if not isinstance(t, torch.Tensor):
        raise InvalidInputError(f"expected a torch.Tensor, got {type(t).__name__}")
    if t.is_sparse or t.layout != torch.strided:
        raise InvalidInputError("only dense (strided) tensors can be stored")
    if quantize and t.is_floating_point() and t.numel():
        qp = quantize_page(t.cpu())
        return PagePayload("int8", dtype_name(t.dtype), tuple(t.shape), _as_bytes(qp.q),
                           qp.scale.numpy().copy(), tuple(qp.scale.shape))
    return PagePayload("raw", dtype_name(t.dtype), tuple(t.shape), _as_bytes(t))


def encode_bytes(data: bytes | bytearray | memoryview) -> PagePayload:
    arr = np.frombuffer(bytes(data), dtype=np.uint8)
    return PagePayload("bytes", "uint8", (arr.size,), arr)


def _tensor_over(arr: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():
        # Arrays from ray.get are read-only views of shared memory; torch warns
        # that it can't enforce that. We document read-only use instead of copying.
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(arr)


def decode_payload(p: PagePayload, copy: bool = False) -> torch.Tensor | bytes:
    """Payload -> tensor (zero-copy view unless ``copy`` or int8) or bytes for kind "bytes"."""
    if p.kind == "bytes":
        return p.data.tobytes()
    dtype = dtype_from_name(p.dtype)
    if p.kind == "int8":
        q = _tensor_over(p.data).view(torch.int8).reshape(p.shape)
        scale = torch.from_numpy(np.array(p.scale, dtype=np.float32)).reshape(p.scale_shape)
        return dequantize_page(QuantizedPage(q=q, scale=scale, dtype=dtype))
    if p.kind != "raw":
        raise InvalidInputError(f"unknown payload kind {p.kind!r}")
    raw = _tensor_over(p.data)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if raw.numel() and raw.data_ptr() % itemsize:
        raw = raw.clone()  # misaligned buffer: reinterpreting would be undefined; copy once
    out = raw.view(dtype).reshape(p.shape)
    return out.clone() if copy else out
