"""Run a model's RMSNorm modules as one kernel each during our forwards.

A query forward of a small decoder is launch-bound on a GPU, and about half of its
kernels are transformers' RMSNorm modules (8-10 kernels per call, 109 calls per
Gemma 3 270M forward). :func:`install_norms` gives each norm module a forward that, while
:func:`norms_active` is set, calls :func:`kernels.rmsnorm.rms_norm` (one Triton kernel)
and otherwise the module's own code. Our runner sets it around its forwards only,
so transformers' own forward (``ModelRunner.reference_logits``, the tests' ground
truth) stays untouched.

Nothing is assumed from class names alone: a module is fused only if, on a probe
input on its own device, transformers' output equals one of the two weight
conventions of :mod:`kernels.rmsnorm` exactly and the kernel agrees within the
dtype's tolerance. Anything else keeps its own forward and is listed in
``FusedNorms.skipped``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from agentctx.kernels.rmsnorm import STYLES, rms_norm, rms_norm_reference
from agentctx.serving.fusions.switch import FusionSwitch

__all__ = ["FusedNorms", "install_norms", "norms_active", "norms_on"]

log = logging.getLogger(__name__)
_SWITCH = FusionSwitch("fused_norms")
# Kernel vs transformers on the probe: differences come only from the order of the fp32 sum.
_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclass
class FusedNorms:
    fused: dict[str, str] = field(default_factory=dict)  # module name -> style
    skipped: dict[str, str] = field(default_factory=dict)  # module name -> why not


norms_active = _SWITCH.active  # with norms_active(): ... runs the fused code (this thread / task only)
norms_on = _SWITCH.on  # whether it is on here (serving/fusions/sandwich.py's layers read it too)


def _eps(module) -> float | None:
    for name in ("eps", "variance_epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float | int):
            return float(value)
    return None


@torch.inference_mode()
def _style_of(module, weight: torch.Tensor, eps: float, impl: str) -> tuple[str | None, str]:
    """The weight convention the module computes, checked on a probe; (None, why) if none fits."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    probe = (torch.randn(5, weight.shape[0], generator=gen) * 3).to(device=weight.device, dtype=weight.dtype)
    expected = module(probe)
    for style in STYLES:
        if torch.equal(rms_norm_reference(probe, weight, eps, style), expected):
            got = rms_norm(probe, weight, eps, style, impl=impl)
            tol = _TOL.get(expected.dtype, 1e-5)
            err = (got.float() - expected.float()).abs().max().item()
            scale = expected.float().abs().max().item()
            if got.dtype != expected.dtype or err > tol * max(1.0, scale):
                return None, f"kernel differs from the module by {err:.3g} ({style} style)"
            return style, ""
    return None, "computes neither RMSNorm convention on a probe input"


def install_norms(model: torch.nn.Module, impl: str = "triton") -> FusedNorms:
    """Give every recognised RMSNorm module of ``model`` a fused forward (idempotent)."""
    report = FusedNorms()
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("RMSNorm"):
            continue
        if getattr(module, "_agentctx_norm_style", None):
            report.fused[name] = module._agentctx_norm_style
            continue
        weight = getattr(module, "weight", None)
        eps = _eps(module)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or eps is None:
            report.skipped[name] = "no 1-D weight or eps attribute"
            continue
        try:
            style, why = _style_of(module, weight, eps, impl)
        except Exception as exc:  # noqa: BLE001 - e.g. no triton: keep transformers' forward
            style, why = None, f"{type(exc).__name__}: {exc}"
        if style is None:
            report.skipped[name] = why
            continue
        _wrap(module, style, eps, impl)
        report.fused[name] = style
    if report.skipped:
        first = next(iter(report.skipped.items()))
        log.warning("fused RMSNorm: %d norm modules keep transformers' forward (e.g. %s: %s)",
                    len(report.skipped), *first)
    return report


def _wrap(module, style: str, eps: float, impl: str) -> None:
    own_forward = module.forward
    if impl == "triton":
        from agentctx.kernels.triton_rmsnorm import triton_rms_norm

        offset = style == "offset"

        def fused(x):  # validated once by the probe; eager forwards pay no per-call checks
            return triton_rms_norm(x, module.weight, eps, offset)
    else:

        def fused(x):
            return rms_norm(x, module.weight, eps, style, impl=impl)

    def forward(x):
        return fused(x) if _SWITCH.on() else own_forward(x)

    module.forward = forward
    module._agentctx_norm_style = style
    module._agentctx_norm_eps = eps
