"""Attention over selected pages of a shared, paged KV cache.

Public API:
    attend_selected(q, k_pages, v_pages, block_table, num_blocks, slot_lens, scale,
                    softcap=None, impl="auto") -> (out, lse)
    attend_selected_reference(...)   plain-PyTorch ground truth of the above
    dense_attention_reference(q, k, v, scale, causal_offset=None, softcap=None)
    merge_attention(out_a, lse_a, out_b, lse_b), merge_many(outs, lses)

Triton and flash-attn are optional and imported only when used.
"""

from .attend_selected import attend_selected
from .merge import merge_attention, merge_many
from .reference import attend_selected_reference, dense_attention_reference

__all__ = [
    "attend_selected",
    "attend_selected_reference",
    "dense_attention_reference",
    "merge_attention",
    "merge_many",
]
