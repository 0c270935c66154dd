"""Attention over selected pages of a shared, paged KV cache.

Public API:
    attend_selected(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale,
                    softcap=None, impl="auto") -> (out, lse)
    attend_selected_reference(...)   plain-PyTorch ground truth of the above
    attend_selected_quant(q, k: QuantPages, v: QuantPages, ...)   the same over fp8/int8 pages
                                     (kernels.kv_quant: quantize_pages, dequantize_pages)
    dense_attention_reference(q, k, v, scale, causal_offset=None, softcap=None)
    merge_attention(out_a, lse_a, out_b, lse_b), merge_many(outs, lses)

Triton and flash-attn are optional and imported only when used.
"""

import sys as _sys

if __name__ == "kernels":  # pragma: no cover - exercised in subprocesses by tests/test_namespace.py
    # This folder is `agentctx.kernels`. It is found under the bare name `kernels` only when the
    # checkout's root is on sys.path: `python -m`/`-c` from the root, and every Ray worker of a
    # driver started there (Ray puts the driver's working directory first on its workers' path).
    # That name belongs to Hugging Face's `kernels` distribution, which transformers probes and
    # imports. Under it this folder acts as if it had no __init__.py, a PEP 420 namespace portion:
    # the distribution when installed, else an empty namespace package (no __file__, which
    # transformers reads as "not installed"). The import system returns what sys.modules holds.
    import importlib.machinery as _machinery
    import importlib.util as _util
    from pathlib import Path as _Path

    _root = _Path(__file__).resolve().parents[1]
    _spec = _machinery.PathFinder.find_spec("kernels", [p for p in _sys.path if _Path(p or ".").resolve() != _root])
    if _spec is None:
        _spec = _machinery.ModuleSpec("kernels", None, is_package=True)
        _spec.submodule_search_locations = []
    _module = _util.module_from_spec(_spec)
    _sys.modules["kernels"] = _module
    if _spec.loader is not None:
        _spec.loader.exec_module(_module)
else:
    from .attend_selected import attend_selected, attend_selected_quant
    from .merge import merge_attention, merge_many
    from .reference import attend_selected_reference, dense_attention_reference

__all__ = [
    "attend_selected",
    "attend_selected_quant",
    "attend_selected_reference",
    "dense_attention_reference",
    "merge_attention",
    "merge_many",
]
