"""A gated MLP's ``act(gate) * up`` as one kernel on CUDA.

With the merged gate/up product (serving/fusions/proj.py) the MLP's middle was two kernels per
layer: the activation over the gate half, then the product with the up half. :func:`act_mul`
reads the (..., 2I) product once and writes (..., I). The activations are those of the model
families we serve: Gemma's tanh-approximated GELU and Llama / Qwen's SiLU.

Rounding follows PyTorch's: the activation is computed in fp32 and rounded to the input dtype,
then the product is computed in fp32 and rounded again, as ``act(gate) * up`` does in half
precision. The kernel's tanh and exp differ from PyTorch's in the last fp32 bits, so a half
precision output can move by one rounding step (tests/kernels/_act_mul_cases.py states the
tolerance). :func:`act_mul_reference` is the plain PyTorch it replaces.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

__all__ = ["ACTS", "act_mul", "act_mul_reference", "activation_of"]

ACTS = ("gelu_tanh", "silu")
_FNS = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


def _validate(gate_up: Tensor, act: str) -> None:
    if act not in ACTS:
        raise ValueError(f"act_mul: act must be one of {ACTS}, got {act!r}")
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"act_mul: the last dim must hold gate and up halves, got {tuple(gate_up.shape)}")
    if not gate_up.is_floating_point():
        raise ValueError(f"act_mul: gate_up must be floating point, got {gate_up.dtype}")


def act_mul_reference(gate_up: Tensor, act: str) -> Tensor:
    """``act(gate) * up`` in plain PyTorch, gate and up the two halves of the last dim."""
    _validate(gate_up, act)
    gate, up = gate_up.chunk(2, dim=-1)
    return _FNS[act](gate) * up


def act_mul(gate_up: Tensor, act: str, impl: str = "auto") -> Tensor:
    """(..., 2I) -> (..., I). impl: "auto" (Triton on CUDA), "torch" or "triton"."""
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"act_mul: impl must be auto, torch or triton, got {impl!r}")
    if impl == "torch" or (impl == "auto" and gate_up.device.type != "cuda"):
        return act_mul_reference(gate_up, act)
    _validate(gate_up, act)
    from .triton_act_mul import triton_act_mul  # lazy: triton is optional

    return triton_act_mul(gate_up, act)


@torch.inference_mode()
def activation_of(fn, device, dtype) -> str | None:
    """Which of :data:`ACTS` the callable ``fn`` computes, bit for bit on a probe on this device
    and dtype (None: none of them; its caller keeps ``fn``)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    probe = (torch.randn(4, 96, generator=gen) * 4).to(device=device, dtype=dtype)
    try:
        got = fn(probe)
    except Exception:  # noqa: BLE001 - not an elementwise activation we know
        return None
    for name, ref in _FNS.items():
        if isinstance(got, Tensor) and got.dtype == probe.dtype and torch.equal(got, ref(probe)):
            return name
    return None
