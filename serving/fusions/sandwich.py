"""Sandwich-norm decoder layers (Gemma 2 / 3) with their residual steps as one kernel each.

A Gemma 3 layer normalises each branch's output before adding it to the residual stream and
normalises the sum before the next branch: ``post_attention_layernorm``, add,
``pre_feedforward_layernorm``, then ``post_feedforward_layernorm``, add and the next layer's
``input_layernorm``. With the norms fused (serving/fusions/norms.py) that is still six launches
per layer; here it is two (:func:`kernels.add_norm.add_norm2`), 72 fewer per Gemma 3 270M
forward. The second one also computes the next norm's output (the next layer's input norm, or
the model's final norm after the last layer) and hands it over: that norm module returns it
when it is called on the very tensor the layer returned, and computes its own otherwise, so a
different call order is slower, never wrong (as serving/fusions/proj.py hands over k and v).

While :func:`kernels`' norms switch is on (our runner's forwards), a recognised layer runs
:func:`_layer_forward` instead of transformers' ``forward``; the attention and the MLP stay
transformers' (with our hook and the other fusions). A layer is recognised by its parts (the
four norms, each already fused with one weight convention, ``self_attn`` and ``mlp``), and
the whole model is then checked on a probe input: its hidden states with the layers' fused
forwards must equal, within the norms' tolerance, those with transformers' forwards (attention
through SDPA for the probe). On a mismatch nothing is installed (``FusedSandwich.skipped``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from agentctx.kernels.add_norm import add_norm2
from agentctx.serving.fusions.norms import norms_active, norms_on

__all__ = ["FusedSandwich", "install_sandwich"]

log = logging.getLogger(__name__)
_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
# Fused vs transformers' forwards on the probe, relative to the hidden states' max magnitude.
_TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@dataclass
class FusedSandwich:
    fused: list[str] = field(default_factory=list)  # layer names
    skipped: dict[str, str] = field(default_factory=dict)  # layer or model name -> why not


class _HandOver:
    """The next norm's output, computed by the previous layer's last kernel, for that norm's input only."""

    def __init__(self):
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None

    def take(self, x: torch.Tensor) -> torch.Tensor | None:
        if self.x is not None and x is self.x:
            y = self.y
            self.x = self.y = None
            return y
        return None


def _norm_parts(norm) -> tuple[torch.Tensor, float, str] | None:
    style = getattr(norm, "_agentctx_norm_style", None)
    eps = getattr(norm, "_agentctx_norm_eps", None)
    weight = getattr(norm, "weight", None)
    return None if style is None or eps is None or weight is None else (weight, eps, style)


def _layers_of(model) -> tuple[list, object] | None:
    """(decoder layers, final norm) of a transformers decoder, or None."""
    body = getattr(model, "model", model)
    layers, final = getattr(body, "layers", None), getattr(body, "norm", None)
    if layers is None or final is None:
        return None
    return list(layers), final


def install_sandwich(model, impl: str = "triton") -> FusedSandwich:
    """Fuse the residual steps of every sandwich-norm layer of ``model`` (call after install_norms)."""
    done = getattr(model, "_agentctx_sandwich_report", None)
    if done is not None:  # idempotent: runners sharing a model install once
        return done
    report = FusedSandwich()
    model._agentctx_sandwich_report = report
    found = _layers_of(model)
    if found is None:
        report.skipped["model"] = "no decoder layers and final norm found"
        return report
    layers, final = found
    parts = []
    for i, layer in enumerate(layers):
        norms = [getattr(layer, n, None) for n in _NORMS]
        got = [None if n is None else _norm_parts(n) for n in norms]
        if not (hasattr(layer, "self_attn") and hasattr(layer, "mlp")) or any(g is None for g in got):
            report.skipped[f"layer {i}"] = "not a sandwich-norm layer with fused norms"
            return report  # all or nothing: the hand-over chains every layer to the next
        parts.append(got)
    next_norm = [layers[i + 1].input_layernorm for i in range(len(layers) - 1)] + [final]
    if _norm_parts(final) is None:
        report.skipped["final norm"] = "not fused"
        return report
    handovers = {id(n): _HandOver() for n in (*[layer.input_layernorm for layer in layers], final)}
    for layer, got, nxt in zip(layers, parts, next_norm):
        _wrap_layer(layer, got, nxt, handovers[id(nxt)], impl)
    for norm in (*[layer.input_layernorm for layer in layers], final):
        _wrap_taker(norm, handovers[id(norm)])
    why = _probe(model, layers)
    if why:
        for layer in layers:
            layer._agentctx_sandwich = None  # every wrapper falls back to transformers' code
        report.skipped["model"] = why
        log.warning("sandwich-norm layers keep transformers' forward: %s", why)
        return report
    report.fused = [f"layer {i}" for i in range(len(layers))]
    return report


def _wrap_layer(layer, parts, nxt, handover: _HandOver, impl: str) -> None:
    own_forward = layer.forward
    (_, _, style), (w_post, e_post, _), (w_pre, e_pre, _), (w_ffn, e_ffn, _) = parts
    w_next, e_next, _ = _norm_parts(nxt)
    layer._agentctx_sandwich = True

    def forward(hidden_states, *args, **kwargs):
        if args or not (norms_on() and layer._agentctx_sandwich):
            return own_forward(hidden_states, *args, **kwargs)
        h = layer.input_layernorm(hidden_states)  # the previous layer may have computed it
        h = layer.self_attn(hidden_states=h, **kwargs)[0]
        x, h = add_norm2(hidden_states, h, w_post, e_post, w_pre, e_pre, style, impl=impl)
        h = layer.mlp(h)
        x, y = add_norm2(x, h, w_ffn, e_ffn, w_next, e_next, style, impl=impl)
        handover.x, handover.y = x, y
        return x

    layer.forward = forward


def _wrap_taker(norm, handover: _HandOver) -> None:
    own_forward = norm.forward

    def forward(x):
        if norms_on():
            y = handover.take(x)
            if y is not None:
                return y
        return own_forward(x)

    norm.forward = forward


@torch.inference_mode()
def _probe(model, layers) -> str:
    """'' if the model's hidden states with the fused layers match transformers' forwards."""
    config = model.config
    saved = config._attn_implementation
    dev = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = torch.randint(3, min(getattr(config, "vocab_size", 256), 256), (1, 12),
                        generator=torch.Generator().manual_seed(0)).to(dev)
    body = getattr(model, "model", model)
    try:
        config._attn_implementation = "sdpa"
        with norms_active(True):
            for layer in layers:
                layer._agentctx_sandwich = False
            want = body(input_ids=ids, use_cache=False).last_hidden_state
            for layer in layers:
                layer._agentctx_sandwich = True
            got = body(input_ids=ids, use_cache=False).last_hidden_state
    except Exception as exc:  # noqa: BLE001 - e.g. a transformers version whose layers differ
        return f"{type(exc).__name__}: {exc}"
    finally:
        config._attn_implementation = saved
    if got.shape != want.shape or not torch.isfinite(got).all():
        return f"probe output {tuple(got.shape)} vs {tuple(want.shape)}"
    err = (got.float() - want.float()).abs().max().item()
    bound = _TOL.get(dtype, 1e-5) * max(1.0, want.float().abs().max().item())
    return "" if err <= bound else f"hidden states differ by {err:.3g} (bound {bound:.3g})"
