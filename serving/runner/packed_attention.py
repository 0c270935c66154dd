"""Attention of a packed step's one-token rows together (the eager decode step of many queries).

A packed step (serving/runner/batch_forward.py) runs the projections and MLPs of every row's new
tokens at once; attention was then done row by row, ~25 small ops per row and layer (the
page gather, the tail concatenation, the window copy, two partial attentions and their
merge). With 8 decode rows on a 2-core CPU that was ~70 of a step's ~170 ms.

Here the rows that append one token (decode rows) are grouped by document, and each group is
attended with a handful of ops per layer (kernels/decode_rows.py):

* global layers: the rows' selected pages gathered into one padded batch (or, when every row
  reads every page, the page pool read in place, shared), plus each row's tail and new token;
* sliding layers: the document's window read once for all rows, each row masking the part
  its position can no longer see, plus the last W tokens of each row's tail.

Each part returns its log-sum-exp and the parts merge exactly (kernels.merge). Everything that
does not depend on the layer (masks, tables, positions) is built once per step in
:func:`decode_groups`. Tails are updated as before: each row's shadow tail gets a new tensor
per layer, nothing is written in place, so a failed step leaves the real tails unchanged.
The row-by-row path (``ModelRunner``'s ``_sliding`` / ``_global_extend``) stays the reference
(tests/serving/test_packed_attention.py) and serves prompt chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn.utils.rnn import pad_sequence

from agentctx.kernels import merge_attention
from agentctx.kernels.decode_rows import attend_rows, attend_rows_shared
from agentctx.serving.runner.paged_kv import DocKV, QueryTail

__all__ = ["ExtendStep", "PackedStep", "DecodeGroup", "decode_groups", "attend_group", "GATHER_BYTES"]

# Bytes of gathered page KV (K and V, one layer) a decode group may hold at once; rows beyond
# it go into further groups, and a row that alone reads more attends row by row (in chunks).
GATHER_BYTES = 64 << 20


@dataclass
class ExtendStep:
    doc: DocKV
    tail: QueryTail
    positions: torch.Tensor  # (T,) positions of the new tokens
    block_table: torch.Tensor  # (1, M) int32 selected page indices, sorted
    num_blocks: torch.Tensor  # (1,) int32
    slot_lens: torch.Tensor  # (num_pages,) int32
    kernel_impl: str


@dataclass
class DecodeGroup:
    """Decode rows over one document, attended together; built once per step.

    ``rows``: indices into ``PackedStep.rows``; ``tokens``: (n,) their token index in the
    packed sequence. ``table``: (n, M) long page slots (padding: slot 0) with ``page_valid``
    (n, M * P), or None when every row reads every page. ``tail_keep``/``tail_valid``: how many
    of a row's tail tokens (its new one included) global layers attend, as a (n, max) mask;
    ``win_keep``/``win_valid``: the same for sliding layers (the last W at most);
    ``doc_win_valid``: (n, Wt) which entries of the document's window each row still sees.
    """

    doc: DocKV
    rows: list[int]
    tokens: torch.Tensor
    table: torch.Tensor | None
    page_valid: torch.Tensor | None
    tail_keep: list[int]
    tail_valid: torch.Tensor
    win_keep: list[int] = field(default_factory=list)
    win_valid: torch.Tensor | None = None
    doc_win_valid: torch.Tensor | None = None


@dataclass
class PackedStep:
    """Several queries' new tokens packed into one sequence (serving/runner/batch_forward.py).

    Row r owns tokens ``spans[r] = (start, end)`` of the packed forward; the projections,
    norms and MLPs run over all of them at once. Rows in ``groups`` (one new token each) are
    attended together per document (:func:`attend_group`); the others one by one on their
    own pages and tail. Rows may be over different documents and plans."""

    rows: list[ExtendStep]
    spans: list[tuple[int, int]]
    groups: list[DecodeGroup] = field(default_factory=list)


def _valid(lengths: list[int], device) -> torch.Tensor:
    idx = torch.arange(max(lengths), device=device)
    return idx[None, :] < torch.tensor(lengths, device=device)[:, None]


def _row_bytes(st: ExtendStep, every: bool, num_heads: int) -> int:
    """What a decode row holds at once in one layer: its gathered page KV, or, when it reads
    every page in place, its scores and probabilities over them."""
    doc, lay = st.doc, st.doc.layout
    if every:
        return 2 * num_heads * doc.num_tokens * 4
    # Gathered pages are float (quantised ones are dequantised as they are gathered).
    return 2 * int(st.block_table.shape[1]) * doc.page_size * lay.num_kv_heads * lay.head_dim * \
        doc.float_dtype.itemsize


def decode_groups(steps: list[ExtendStep], spans: list[tuple[int, int]], num_heads: int) -> list[DecodeGroup]:
    """Group the one-token rows of a packed step by document and by whether they read every
    page, each group within ``GATHER_BYTES``; a row over it alone stays out (row by row)."""
    by_key: dict[tuple[int, bool], list[tuple[int, int]]] = {}  # (doc, every page) -> (row, bytes)
    for i, (st, (s, e)) in enumerate(zip(steps, spans)):
        if e - s != 1 or not st.doc.k_pages:
            continue
        every = int(st.block_table.shape[1]) == st.doc.num_pages
        need = _row_bytes(st, every, num_heads)
        if need <= GATHER_BYTES:
            by_key.setdefault((id(st.doc), every), []).append((i, need))
    groups = []
    for (_, every), rows in by_key.items():
        batch, held = [], 0
        for i, need in rows:
            if batch and held + need > GATHER_BYTES:
                groups.append(_group(steps, spans, batch, every))
                batch, held = [], 0
            batch.append(i)
            held += need
        groups.append(_group(steps, spans, batch, every))
    return groups


def _group(steps: list[ExtendStep], spans, idx: list[int], every: bool) -> DecodeGroup:
    doc = steps[idx[0]].doc
    dev = steps[idx[0]].positions.device
    p = doc.page_size
    tails = [steps[i].tail.length for i in idx]
    table = page_valid = None
    if not every:
        tables = [steps[i].block_table[0].long() for i in idx]
        table = pad_sequence(tables, batch_first=True)  # (n, M), padding slot 0 (masked below)
        in_row = _valid([t.numel() for t in tables], dev)  # (n, M)
        lens = doc.slot_lens().to(dev).long()[table]  # (n, M) valid tokens of each page
        tok = torch.arange(p, device=dev)
        page_valid = ((tok[None, None, :] < lens[:, :, None]) & in_row[:, :, None]).reshape(len(idx), -1)
    keep = [t + 1 for t in tails]
    g = DecodeGroup(doc, idx, torch.tensor([spans[i][0] for i in idx], device=dev), table, page_valid, keep,
                    _valid(keep, dev))
    window = doc.layout.window
    if doc.layout.sliding_layers and window:
        g.win_keep = [min(k, window) for k in keep]
        g.win_valid = _valid(g.win_keep, dev)
        if doc.window_pos is not None and doc.window_pos.numel():
            q_pos = torch.cat([steps[i].positions for i in idx])  # (n,)
            g.doc_win_valid = doc.window_pos[None, :] > (q_pos[:, None] - window)
    return g


def attend_group(g: DecodeGroup, steps: list[ExtendStep], layer: int, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor, scale: float, softcap: float | None) -> torch.Tensor:
    """The group's attention output (n, Hq, D) for one layer; q (n, Hq, D), k, v (n, Hkv, D)
    are its rows' new tokens. Appends each new k/v to its row's (shadow) tail."""
    doc = g.doc
    sliding = layer in doc.layout.sliding_layers
    tail_k, tail_v = [], []
    for j, i in enumerate(g.rows):
        tail = steps[i].tail
        old_k, old_v = tail.k.get(layer), tail.v.get(layer)
        nk = k[j : j + 1] if old_k is None else torch.cat([old_k, k[j : j + 1]])
        nv = v[j : j + 1] if old_v is None else torch.cat([old_v, v[j : j + 1]])
        tail.k[layer], tail.v[layer] = nk, nv
        n = g.win_keep[j] if sliding else g.tail_keep[j]
        tail_k.append(nk[-n:] if nk.shape[0] > n else nk)
        tail_v.append(nv[-n:] if nv.shape[0] > n else nv)
    o_tail, l_tail = attend_rows(q, pad_sequence(tail_k, batch_first=True), pad_sequence(tail_v, batch_first=True),
                                 g.win_valid if sliding else g.tail_valid, scale, softcap)
    if sliding:
        wk = doc.window_k.get(layer)
        if wk is None or g.doc_win_valid is None:
            return o_tail
        o_doc, l_doc = attend_rows_shared(q, wk, doc.window_v[layer], g.doc_win_valid, scale, softcap)
    elif g.table is None:  # every row reads every page: the pool in place, read once
        n_tok = doc.num_tokens
        flat_k, flat_v = doc.flat(layer)
        every = torch.ones(q.shape[0], n_tok, dtype=torch.bool, device=q.device)
        o_doc, l_doc = attend_rows_shared(q, flat_k[:n_tok], flat_v[:n_tok], every, scale, softcap)
    else:
        n, m = g.table.shape
        pk, pv = doc.gather(layer, g.table)  # (n, m, P, Hkv, D), float even from quantised pages
        pk, pv = pk.view(n, m * doc.page_size, *k.shape[1:]), pv.view(n, m * doc.page_size, *v.shape[1:])
        o_doc, l_doc = attend_rows(q, pk, pv, g.page_valid, scale, softcap)
    out, _ = merge_attention(o_doc, l_doc, o_tail, l_tail)
    return out
