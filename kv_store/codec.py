"""How a page tensor is stored in the Ray object store: raw bytes + dtype + shape.

Ray pickles a ``torch.Tensor`` by copying its storage, so every ``ray.get``
would allocate a private copy in the reader — N agents, N copies. A numpy
``uint8`` array, by contrast, is stored out-of-band and ``ray.get`` returns a
read-only view straight into shared memory. So pages travel as
:class:`PagePayload` (numpy bytes + metadata) and :func:`decode_payload`
rebuilds a tensor over that same memory without copying.

Tensors returned by ``decode_payload(copy=False)`` alias shared memory: treat
them as read-only (``.clone()`` before writing in place).

Quantised KV pages (``model.kv_dtype`` fp8_e4m3 / int8; the serving layer quantises them with
``kernels/kv_quant.py``) are kind ``"kvq-<float8_e4m3fn|int8>"``: one uint8 buffer holding the
K scales, the V scales (float32, first, so they stay 4-byte aligned) and then the page's
``(L_global, 2, P, Hkv, D)`` values, one byte each; ``scale_shape`` is the K scale shape followed
by the V scale shape (4 + 4 dims, ``(L_global, 1|P, Hkv, 1|D)``). One buffer, no ``scale``
array, so the disk tier (``spill.py``) writes and reads it as it does a raw page. ``dtype`` is
the dtype ``decode_payload`` dequantises to (the publisher's compute dtype).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from agentctx.common.kv_page import QuantKVPage  # the unit the serving layer holds too

from .errors import InvalidInputError
from .quant import QuantizedPage, dequantize_page, quantize_page

__all__ = ["PagePayload", "QuantKVPage", "encode_tensor", "encode_kv_quant", "decode_payload", "decode_kv_quant",
           "encode_bytes", "dtype_name", "dtype_from_name"]

_KVQ_PREFIX = "kvq-"
_QUANT_DTYPES = ("float8_e4m3fn", "int8")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidInputError(f"unknown torch dtype {name!r}")
    return dtype


@dataclass
class PagePayload:
    """One stored page (or tensor blob): ``kind`` is "raw", "int8" (quantized), "kvq-..." or "bytes"."""

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


def encode_kv_quant(data: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor,
                    dtype: torch.dtype) -> PagePayload:
    """A quantised page -> payload (see the module docstring); ``dtype``: what it dequantises to."""
    if not isinstance(data, torch.Tensor) or data.dim() != 5 or data.shape[1] != 2:
        raise InvalidInputError(f"a quantised page is (L, 2, P, Hkv, D), got {getattr(data, 'shape', data)}")
    if dtype_name(data.dtype) not in _QUANT_DTYPES:
        raise InvalidInputError(f"quantised page values must be float8_e4m3fn or int8, got {data.dtype}")
    L, _, P, H, D = data.shape
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s.dtype != torch.float32 or s.dim() != 4 or s.shape[0] != L or s.shape[2] != H \
                or s.shape[1] not in (1, P) or s.shape[3] not in (1, D):
            raise InvalidInputError(f"{name} must be float32 (L, 1|P, Hkv, 1|D) for page {tuple(data.shape)}, "
                                    f"got {s.dtype} {tuple(s.shape)}")
    buf = np.concatenate([_as_bytes(k_scale), _as_bytes(v_scale), _as_bytes(data)])
    return PagePayload(_KVQ_PREFIX + dtype_name(data.dtype), dtype_name(dtype), tuple(data.shape), buf,
                       None, tuple(k_scale.shape) + tuple(v_scale.shape))


def decode_kv_quant(p: PagePayload) -> QuantKVPage:
    """A "kvq-..." payload -> its quantised values and scales (views of the payload's memory)."""
    qname = p.kind.removeprefix(_KVQ_PREFIX)
    if not p.kind.startswith(_KVQ_PREFIX) or qname not in _QUANT_DTYPES or len(p.scale_shape) != 8:
        raise InvalidInputError(f"not a quantised KV page: kind {p.kind!r}, scale_shape {p.scale_shape}")
    ks, vs = tuple(p.scale_shape[:4]), tuple(p.scale_shape[4:])
    nk, nv = math.prod(ks), math.prod(vs)
    raw = _tensor_over(p.data)
    if raw.numel() != 4 * (nk + nv) + math.prod(p.shape):
        raise InvalidInputError(f"quantised page of {raw.numel()} bytes does not match shape {p.shape}")
    scales = raw[: 4 * (nk + nv)]
    if scales.numel() and scales.data_ptr() % 4:
        scales = scales.clone()  # misaligned buffer: copy the scales once
    scales = scales.view(torch.float32)
    data = raw[4 * (nk + nv):].view(dtype_from_name(qname)).reshape(p.shape)
    return QuantKVPage(data, scales[:nk].reshape(ks), scales[nk:].reshape(vs), dtype_from_name(p.dtype))


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
    """Payload -> tensor (zero-copy view unless ``copy``, int8 or kvq) or bytes for kind "bytes".

    Quantised KV pages come back dequantised to their recorded dtype (a new tensor), so every
    reader of a store page gets the tensor it always did; ``decode_kv_quant`` keeps them quantised.
    """
    if p.kind == "bytes":
        return p.data.tobytes()
    if p.kind.startswith(_KVQ_PREFIX):
        return decode_kv_quant(p).dequantize()
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
