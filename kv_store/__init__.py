"""Shared, refcounted, distributed KV page store.

Many agents (Ray actors) read one long document's KV pages without copying
them: pages live once in the Ray object store, owned by a detached store
actor; a directory (Redis, or an in-process fallback) maps contexts to pages
and keeps refcounts and holder leases. See ``store.py`` for the facade.
"""

from .codec import PagePayload, decode_payload, encode_tensor
from .device_cache import DevicePageCache
from .directories import make_directory
from .directory import NO_REDIS_WARNING, Directory, InProcessDirectory
from .errors import (
    BlobNotFoundError,
    ContextExistsError,
    ContextLostError,
    ContextNotFoundError,
    DeviceCacheFullError,
    InvalidInputError,
    PageNotInContextError,
    PagesMissingError,
    StoreError,
    StoreUnavailableError,
)
from .handle import ContextHandle
from .hashing import page_hash, page_hashes, tenant_salt
from .metrics import refcount_histogram
from .quant import QuantizedPage, dequantize_page, quantize_page
from .records import BlobMeta, ContextRecord, DeleteResult, ReapResult, ReleaseResult
from .spill import SpillStore
from .store import KVStore

__all__ = [
    "KVStore", "ContextHandle", "ContextRecord", "BlobMeta", "DeleteResult", "ReapResult", "ReleaseResult",
    "Directory", "InProcessDirectory", "make_directory", "NO_REDIS_WARNING",
    "page_hash", "page_hashes", "tenant_salt",
    "DevicePageCache", "QuantizedPage", "quantize_page", "dequantize_page",
    "PagePayload", "encode_tensor", "decode_payload", "SpillStore", "refcount_histogram",
    "StoreError", "StoreUnavailableError", "ContextNotFoundError", "ContextExistsError", "PagesMissingError",
    "PageNotInContextError", "BlobNotFoundError", "ContextLostError", "InvalidInputError", "DeviceCacheFullError",
]
