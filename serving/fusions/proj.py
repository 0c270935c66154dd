"""Merged projections: one matrix product for q/k/v and one for gate/up during our forwards.

A decode forward of a small model is launch-bound on a GPU: Gemma 3 270M runs 127
matrix products per token, ~4.7 us each on an H200, most of it fixed cost, not bytes.
Attention's q, k and v projections read the same input, and so do the MLP's gate and
up projections, so each group can be one product over the rows of its weights stacked
(7 products per layer become 4).

:func:`install_proj` stacks each group's weights into one tensor and rebinds the
modules' own weights to row views of it, so no memory is added and transformers' own
forward (the tests' ground truth) reads the same numbers. While :func:`proj_active` is
set (our runner sets it around its forwards):

* an MLP with ``gate_proj``/``up_proj``/``down_proj``/``act_fn`` runs
  ``down(act(gate) * up)`` with gate and up from the one product; on a GPU, where its
  ``act_fn`` computes one of :data:`kernels.act_mul.ACTS` bit for bit and the kernel matches
  it on a probe, ``act(gate) * up`` is one Triton kernel (``FusedProj.act_mul``);
* ``q_proj(x)`` computes q, k and v at once and keeps k and v for the ``k_proj(x)`` and
  ``v_proj(x)`` calls that every supported attention forward makes next on the same
  ``x``. They take them only if handed that very tensor; any other call runs the
  module's own product, so a different call order is slower, never wrong.

Forwards on one model are serialised (the engine holds a lock), so the per-module
hand-over needs no thread-local state. If a module's weight no longer lives in the stacked
tensor (the model was moved or a weight replaced after install), its group runs the modules'
own products again: a stale copy is never read. A module whose merged product does not match
its own on a probe input keeps its own forward (``FusedProj.skipped``).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from agentctx.kernels.act_mul import act_mul, activation_of
from agentctx.serving.fusions.switch import FusionSwitch

__all__ = ["FusedProj", "install_proj", "proj_active"]

log = logging.getLogger(__name__)
_SWITCH = FusionSwitch("fused_proj")
# Merged vs separate products on the probe: only the GEMM's blocking may differ.
_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
_QKV = ("q_proj", "k_proj", "v_proj")
_GATE_UP = ("gate_proj", "up_proj")


@dataclass
class FusedProj:
    fused: dict[str, str] = field(default_factory=dict)  # module name -> "qkv" | "gate_up"
    skipped: dict[str, str] = field(default_factory=dict)  # module name -> why not
    act_mul: dict[str, str] = field(default_factory=dict)  # MLP name -> activation run as one kernel


proj_active = _SWITCH.active  # with proj_active(): ... runs the fused code (this thread / task only)


def _linears(module, names) -> list[nn.Linear] | None:
    mods = [getattr(module, n, None) for n in names]
    if not all(type(m) is nn.Linear for m in mods):  # subclasses (quantised layers) keep their own forward
        return None
    first = mods[0].weight
    if any(m.weight.dtype != first.dtype or m.weight.device != first.device
           or m.in_features != mods[0].in_features for m in mods):
        return None
    if len({m.bias is None for m in mods}) != 1:
        return None
    return mods


def _stack(mods: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
    """One weight (and bias) over the modules' rows; their own become row views of it."""
    sizes = [m.out_features for m in mods]
    with torch.no_grad():
        weight = torch.cat([m.weight.detach() for m in mods])
        bias = None if mods[0].bias is None else torch.cat([m.bias.detach() for m in mods])
        for m, w, b in zip(mods, weight.split(sizes), bias.split(sizes) if bias is not None else [None] * len(mods)):
            m.weight = nn.Parameter(w, requires_grad=False)
            if b is not None:
                m.bias = nn.Parameter(b, requires_grad=False)
    return weight, bias, sizes


@torch.inference_mode()
def _probe_error(mods: list[nn.Linear], weight, bias, sizes) -> str:
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(5, mods[0].in_features, generator=gen).to(device=weight.device, dtype=weight.dtype)
    for m, got in zip(mods, F.linear(x, weight, bias).split(sizes, dim=-1)):
        want = m(x)
        err = (got.float() - want.float()).abs().max().item()
        if err > _TOL.get(want.dtype, 1e-5) * max(1.0, want.float().abs().max().item()):
            return f"merged product differs from the module's by {err:.3g}"
    return ""


def install_proj(model: nn.Module, impl: str = "torch") -> FusedProj:
    """Merge q/k/v and gate/up products of every recognised module of ``model`` (idempotent).
    ``impl`` is accepted for symmetry with the other fusions: this one is plain PyTorch."""
    del impl
    report = FusedProj()
    for name, module in model.named_modules():
        for kind, names, wrap in (("qkv", _QKV, _wrap_qkv), ("gate_up", _GATE_UP, _wrap_mlp)):
            if not all(hasattr(module, n) for n in names):
                continue
            if kind == "gate_up" and not (hasattr(module, "down_proj") and hasattr(module, "act_fn")):
                report.skipped[name] = "no down_proj / act_fn"
                continue
            if getattr(module, "_agentctx_proj", None) == kind:
                report.fused[name] = kind
                continue
            mods = _linears(module, names)
            if mods is None:
                report.skipped[name] = f"{'/'.join(names)} are not plain nn.Linear of one dtype, device and input"
                continue
            weight, bias, sizes = _stack(mods)
            why = _probe_error(mods, weight, bias, sizes)
            if why:
                report.skipped[name] = why
                continue
            if kind == "gate_up":
                act = _kernel_act(module, weight, sizes)
                if act:
                    report.act_mul[name] = act
                wrap(module, mods, weight, bias, sizes, act)
            else:
                wrap(module, mods, weight, bias, sizes)
            module._agentctx_proj = kind
            report.fused[name] = kind
    if report.skipped:
        first = next(iter(report.skipped.items()))
        log.warning("merged projections: %d modules keep their own products (e.g. %s: %s)",
                    len(report.skipped), *first)
    return report


def _still_views(mods, weight) -> Callable[[], bool]:
    """A check that every module's weight still lies where install put it (cheap: pointers)."""
    want, row = [], weight.data_ptr()
    for m in mods:
        want.append(row)
        row += m.weight.numel() * m.weight.element_size()

    def check() -> bool:
        return all(m.weight.data_ptr() == p for m, p in zip(mods, want))

    return check


@torch.inference_mode()
def _kernel_act(module, weight, sizes) -> str | None:
    """The activation the act_mul kernel runs for this MLP on its GPU, or None (keep act_fn)."""
    if weight.device.type != "cuda" or sizes[0] != sizes[1] or importlib.util.find_spec("triton") is None:
        return None
    act = activation_of(module.act_fn, weight.device, weight.dtype)
    if act is None:
        return None
    gen = torch.Generator(device="cpu").manual_seed(1)
    gate_up = (torch.randn(5, 2 * sizes[0], generator=gen) * 3).to(device=weight.device, dtype=weight.dtype)
    gate, up = gate_up.split(sizes, dim=-1)
    want = module.act_fn(gate) * up
    try:
        got = act_mul(gate_up, act, impl="triton")
    except Exception as exc:  # noqa: BLE001 - e.g. a compile error: keep act_fn
        log.warning("act_mul kernel unavailable (%s: %s); the MLP keeps its act_fn", type(exc).__name__, exc)
        return None
    err = (got.float() - want.float()).abs().max().item()
    return act if err <= _TOL.get(want.dtype, 1e-5) * max(1.0, want.float().abs().max().item()) else None


def _wrap_mlp(module, mods, weight, bias, sizes, act: str | None = None) -> None:
    own_forward = module.forward
    intact = _still_views(mods, weight)

    def forward(x):
        if not (_SWITCH.on() and intact()):
            return own_forward(x)
        gate_up = F.linear(x, weight, bias)
        if act is not None:
            return module.down_proj(act_mul(gate_up, act, impl="triton"))
        gate, up = gate_up.split(sizes, dim=-1)
        return module.down_proj(module.act_fn(gate) * up)

    module.forward = forward


def _wrap_qkv(module, mods, weight, bias, sizes) -> None:
    q_mod, k_mod, v_mod = mods
    held: dict[str, object] = {}  # the input q_proj saw, and the k and v it computed for it
    own = {m: m.forward for m in mods}
    intact = _still_views(mods, weight)

    def q_forward(x):
        if not (_SWITCH.on() and intact()):
            return own[q_mod](x)
        q, k, v = F.linear(x, weight, bias).split(sizes, dim=-1)
        held.update(x=x, k=k, v=v)
        return q

    def taker(mod, key):
        def forward(x):
            if _SWITCH.on() and held.get("x") is x and key in held:
                out = held.pop(key)
                if "k" not in held and "v" not in held:
                    held.clear()  # drop the input too: nothing is kept past the layer
                return out
            return own[mod](x)

        return forward

    q_mod.forward = q_forward
    k_mod.forward = taker(k_mod, "k")
    v_mod.forward = taker(v_mod, "v")
