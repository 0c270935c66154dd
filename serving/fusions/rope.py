"""Run attention layers' rotary position embedding as one kernel per layer during our forwards.

transformers' ``apply_rotary_pos_emb(q, k, cos, sin)`` is about ten small kernels per
layer (rotate_half's slices, neg and cat, muls and adds, for q and for k); a Gemma 3 270M
query forward replayed as a CUDA graph is launch-bound, and these are ~170 of its ~600
launches. :func:`install_rope` replaces the module-level function that an attention
class's forward calls with a wrapper that, while :func:`rope_active` is set, calls
:func:`kernels.rope.apply_rope` (one Triton kernel for q and k) and otherwise the original.
Our runner sets it around its forwards only, so transformers' own forward
(``ModelRunner.reference_logits``, the tests' ground truth) stays untouched.

The function is a global of the module that defines the attention forward, so the patch
is per transformers module (all its models, in this process), gated per forward by the
context variable. Nothing is assumed from names alone: a module's function is fused only
if the forward looks it up as a global, it computes transformers' RoPE bit for bit on a
probe of the layer's head counts, device and dtype, and the kernel agrees within the
dtype's tolerance. Anything else keeps its own code and is listed in ``FusedRope.skipped``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from dataclasses import dataclass, field

import torch

from agentctx.kernels.rope import apply_rope, apply_rope_reference, rope_inputs_problem
from agentctx.serving.fusions.switch import FusionSwitch

__all__ = ["FusedRope", "install_rope", "rope_active"]

log = logging.getLogger(__name__)
_SWITCH = FusionSwitch("fused_rope")
_FN = "apply_rotary_pos_emb"
# Kernel vs transformers on the probe, relative to the output's max magnitude: the kernel
# rounds once from fp32 where transformers' op order rounds three times, up to two ulps apart.
_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclass
class FusedRope:
    fused: dict[str, str] = field(default_factory=dict)  # attention module name -> patched python module
    skipped: dict[str, str] = field(default_factory=dict)  # attention module name -> why not


rope_active = _SWITCH.active  # with rope_active(): ... runs the fused code (this thread / task only)


def _original(fn):
    return getattr(fn, "_agentctx_original", fn)


def _head_shapes(module) -> tuple[int, int, int] | None:
    """(Hq, Hkv, D) of an attention module, from its config and head_dim."""
    config = getattr(module, "config", None)
    hq = getattr(config, "num_attention_heads", None)
    hkv = getattr(config, "num_key_value_heads", None) or hq
    d = getattr(module, "head_dim", None)
    if not all(isinstance(x, int) and x > 0 for x in (hq, hkv, d)):
        return None
    return hq, hkv, d


@torch.inference_mode()
def _probe(original, shapes, device, dtype, impl: str) -> str | None:
    """None if ``original`` is transformers' RoPE and the kernel matches it; else why not."""
    hq, hkv, d = shapes
    gen = torch.Generator(device="cpu").manual_seed(0)
    b, t = 2, 5

    def heads(h):  # the transposed (B, T, H, D) projection transformers passes
        return (torch.randn(b, t, h, d, generator=gen) * 3).to(device=device, dtype=dtype).transpose(1, 2)

    angles = torch.rand(b, t, d // 2, generator=gen) * 1000
    emb = torch.cat((angles, angles), dim=-1)
    q, k = heads(hq), heads(hkv)
    cos, sin = emb.cos().to(device=device, dtype=dtype), emb.sin().to(device=device, dtype=dtype)
    expected = original(q, k, cos, sin)
    if not all(torch.equal(r, e) for r, e in zip(apply_rope_reference(q, k, cos, sin), expected)):
        return "computes something other than transformers' RoPE on a probe input"
    for got, want in zip(apply_rope(q, k, cos, sin, impl=impl), expected):
        err = (got.float() - want.float()).abs().max().item()
        scale = want.float().abs().max().item()
        if got.dtype != want.dtype or got.shape != want.shape or err > _TOL.get(dtype, 1e-5) * max(1.0, scale):
            return f"kernel differs from transformers' RoPE by {err:.3g} on a probe input"
    return None


def install_rope(model: torch.nn.Module, impl: str = "triton") -> FusedRope:
    """Fuse the RoPE of every recognised attention module of ``model`` (idempotent).

    impl: "triton" (the kernel; CUDA tensors, or CPU ones under TRITON_INTERPRET=1) or
    "torch" (the plain reference, any device; for tests).
    """
    if impl not in ("triton", "torch"):
        raise ValueError(f"install_rope: impl must be triton or torch, got {impl!r}")
    report = FusedRope()
    probes: dict[tuple, str | None] = {}  # (python module, heads, device, dtype) -> why not
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        # transformers wraps some forwards (e.g. deprecate_kwarg); the global lookup is in the innermost.
        forward = inspect.unwrap(type(module).forward)
        py_module = sys.modules.get(forward.__module__)
        fn = getattr(py_module, _FN, None)
        if not callable(fn):
            report.skipped[name] = f"{forward.__module__} defines no {_FN}"
            continue
        if _FN not in getattr(getattr(forward, "__code__", None), "co_names", ()):
            report.skipped[name] = f"{type(module).__name__}.forward does not call the module-level {_FN}"
            continue
        shapes = _head_shapes(module)
        param = next(module.parameters(), None)
        if shapes is None or param is None:
            report.skipped[name] = "no head counts (config.num_attention_heads, head_dim) or parameters"
            continue
        key = (py_module.__name__, shapes, param.device, param.dtype)
        if key not in probes:
            try:
                probes[key] = _probe(_original(fn), shapes, param.device, param.dtype, impl)
            except Exception as exc:  # noqa: BLE001 - e.g. no triton or no GPU: keep transformers' code
                probes[key] = f"{type(exc).__name__}: {exc}"
        if probes[key] is not None:
            report.skipped[name] = probes[key]
            continue
        _patch(py_module, impl)
        report.fused[name] = py_module.__name__
    if report.skipped:
        first = next(iter(report.skipped.items()))
        log.warning("fused RoPE: %d attention modules keep transformers' RoPE (e.g. %s: %s)",
                    len(report.skipped), *first)
    return report


def _patch(py_module, impl: str) -> None:
    # One patch per python module serves every model of that family in this process; a later
    # install with another impl re-wraps the original (the last impl wins).
    current = getattr(py_module, _FN)
    if getattr(current, "_agentctx_impl", None) == impl:
        return  # installed already: never wrap a wrapper
    setattr(py_module, _FN, _wrapper(_original(current), impl))


def _wrapper(original, impl: str):
    if impl == "triton":
        from agentctx.kernels.triton_attend import INTERPRET
        from agentctx.kernels.triton_rope import triton_rope as fused

        def on_kernel_device(q):
            return q.is_cuda or (INTERPRET and q.device.type == "cpu")
    else:
        fused = functools.partial(apply_rope, impl=impl)

        def on_kernel_device(q):
            return True

    @functools.wraps(original)  # keeps the original reachable as __wrapped__
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        # Anything but transformers' plain call (another unsqueeze_dim, position_ids, shapes the
        # kernel does not take, autograd) runs the original: the kernel has no backward.
        if (
            _SWITCH.on()
            and not args
            and kwargs.keys() <= {"unsqueeze_dim"}
            and kwargs.get("unsqueeze_dim", 1) == 1
            and on_kernel_device(q)
            and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad))
            and rope_inputs_problem(q, k, cos, sin) is None
        ):
            return fused(q, k, cos, sin)
        return original(q, k, cos, sin, *args, **kwargs)

    apply_rotary_pos_emb._agentctx_original = original
    apply_rotary_pos_emb._agentctx_impl = impl
    return apply_rotary_pos_emb
