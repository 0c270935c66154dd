"""Optional torch.compile of a decoder's RMSNorm modules.

With CUDA-graph queries (serving.static_query) a forward's time is the GPU time of
its ~2000 kernels, most of them tiny elementwise ops from transformers' layer code.
An RMSNorm is ~9 of them (upcast, pow, mean, add, rsqrt, two muls, weight + 1, cast)
and a Gemma 3 layer has six norms; compiled, each norm is one fused kernel. The
module's own forward is compiled (no re-implementation), once per norm class with
dynamic shapes, and bound to this model's instances only.

Off by default: compiling costs tens of seconds at start-up and needs a working
Triton/C++ toolchain. ``ModelRunner(compile_norms=True)`` or ``--compile-norms``.
"""

from __future__ import annotations

import logging
import types

import torch

__all__ = ["compile_norms"]

log = logging.getLogger(__name__)


def compile_norms(model: torch.nn.Module) -> int:
    """Replace the forward of every ``*RMSNorm`` submodule with a compiled one; returns how many."""
    compiled: dict[type, object] = {}
    n = 0
    for mod in model.modules():
        cls = type(mod)
        if not cls.__name__.endswith("RMSNorm") or getattr(mod, "_agentctx_compiled", False):
            continue
        fn = compiled.get(cls)
        if fn is None:
            fn = compiled[cls] = torch.compile(cls.forward, dynamic=True, fullgraph=True)
        mod.forward = types.MethodType(fn, mod)
        mod._agentctx_compiled = True
        n += 1
    log.info("compiled the forward of %d RMSNorm modules (%s)", n, ", ".join(c.__name__ for c in compiled))
    return n
