"""Attention over selected pages of a shared, paged KV cache.

Public API:
    attend_selected(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale,
                    softcap=None, impl="auto") -> (out, lse)
    attend_selected_reference(...)   plain-PyTorch ground truth of the above
    dense_attention_reference(q, k, v, scale, causal_offset=None, softcap=None)
    merge_attention(out_a, lse_a, out_b, lse_b), merge_many(outs, lses)

Triton and flash-attn are optional and imported only when used.
"""

import importlib.util

from .attend_selected import attend_selected
from .merge import merge_attention, merge_many
from .reference import attend_selected_reference, dense_attention_reference


def __getattr__(name: str):
    # Our import name `kernels` is also the import name of Hugging Face's `kernels` distribution,
    # which transformers >= 5.25 requires and imports (`from kernels import CUDAProperties, ...`).
    # With this repository on sys.path ours wins, and without this hook transformers would fail
    # with a bare "cannot import name". Say what happened and how to fix it instead.
    # `from kernels import triton_attend` asks here first for a submodule not yet imported;
    # an AttributeError lets the import system go on and load it.
    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(name)
    raise ImportError(
        f"`kernels.{name}` was asked for, but `kernels` here is agentctx's attention-kernel package "
        f"({__file__}), not Hugging Face's `kernels` distribution. transformers >= 5.25 imports "
        "the latter; agentctx pins transformers < 5.25 (pyproject.toml, scripts/constraints.txt). "
        "Reinstall with `bash scripts/setup.sh`, or `pip install 'transformers>=5.17,<5.25'`."
    )


__all__ = [
    "attend_selected",
    "attend_selected_reference",
    "dense_attention_reference",
    "merge_attention",
    "merge_many",
]
