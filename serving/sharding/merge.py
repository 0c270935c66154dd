"""The exact merge of per-rank partial attention across ranks, and its overlap with compute.

Each rank of a sequence-sharded context (``serving.sharding.attention``) computes a partial
``(out, lse)`` over the selected pages it holds; a rank holding none contributes
``out = 0, lse = -inf``. The merge leaves every rank with the same ``(out, lse)``, equal (up to
rounding) to attention over the union of the pages, so each rank can run the rest of the layer
itself. Two ways:

* ``merge="gather"`` (default): one ``all_gather`` of ``out`` and ``lse`` packed into a single
  fp32 buffer ``(..., D+1)``, then :func:`kernels.merge_many` on every rank. One collective:
  best for decode, where the payload is tiny and latency is what counts.
* ``merge="reduce"``: ``all_reduce(MAX)`` of ``lse``, then ``all_reduce(SUM)`` of
  ``[out * w, w]`` with ``w = exp(lse - max)``. Two dependent collectives but a payload that
  does not grow with the number of ranks: better for long query chunks (prefill) on many ranks.

Overlap of communication with compute (``_pipelined``): the work is cut into chunks (along the
KV-head, batch or query-token axis, chosen by the caller); the merge collective of chunk ``i``
is issued asynchronously (``async_op=True``) right after its local attention and runs while
chunk ``i+1`` is computed. For ``merge="reduce"`` the second collective of chunk ``i`` is issued
after chunk ``i+1``'s compute, so both stages stay off the critical path. The per-chunk merges
are finished at the end. On NCCL the collectives run on NCCL's own stream, so the overlap is
real on the GPU; on gloo they run on gloo's threads. (Pipelining *across layers* is not possible
within one sequence: layer l+1's query depends on layer l's merged output.)

Kept apart from the attention: the collectives (``torch.distributed``) live here, the local
kernels over one rank's pages there; ``_pipelined`` joins them, taking the local compute as a
callable.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from agentctx.kernels import merge_many

__all__ = ["start_merge", "merge_across_ranks", "MERGES"]

MERGES = ("gather", "reduce")


def _world(group) -> int:
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


class _Pending:
    """A merge in flight. ``advance()`` issues the next stage, ``wait()`` returns (out, lse)."""

    def advance(self) -> None:  # pragma: no cover - overridden
        pass

    def wait(self) -> tuple[Tensor, Tensor]:  # pragma: no cover - overridden
        raise NotImplementedError


class _Done(_Pending):
    def __init__(self, out: Tensor, lse: Tensor):
        self.res = (out, lse.float())

    def wait(self):
        return self.res


def _all_gather_flat(out_flat: Tensor, in_flat: Tensor, group):
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out_flat, in_flat, group=group, async_op=True)


class _GatherMerge(_Pending):
    def __init__(self, out: Tensor, lse: Tensor, group, world: int):
        self.dtype, self.shape, self.world = out.dtype, out.shape, world
        packed = torch.cat([out.float(), lse.float().unsqueeze(-1)], dim=-1).contiguous()
        self.packed = packed  # keep alive until the collective is done
        self.buf = torch.empty(world * packed.numel(), dtype=torch.float32, device=out.device)
        self.work = _all_gather_flat(self.buf, packed.view(-1), group)

    def wait(self):
        self.work.wait()
        D = self.shape[-1]
        parts = self.buf.view(self.world, *self.shape[:-1], D + 1)
        outs = [parts[i, ..., :D] for i in range(self.world)]
        out, lse = merge_many(outs, [parts[i, ..., D] for i in range(self.world)])
        return out.to(self.dtype), lse


class _ReduceMerge(_Pending):
    def __init__(self, out: Tensor, lse: Tensor, group):
        self.out, self.lse, self.group = out, lse.float(), group
        self.m = self.lse.clone()
        self.work = dist.all_reduce(self.m, op=dist.ReduceOp.MAX, group=group, async_op=True)
        self.buf = None

    def advance(self):
        if self.buf is not None:
            return
        self.work.wait()
        m = self.m
        self.m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        w = torch.exp(self.lse - self.m_safe)  # 0 for an empty partial (lse = -inf)
        self.buf = torch.cat([self.out.float() * w.unsqueeze(-1), w.unsqueeze(-1)], dim=-1).contiguous()
        self.work = dist.all_reduce(self.buf, op=dist.ReduceOp.SUM, group=self.group, async_op=True)

    def wait(self):
        self.advance()
        self.work.wait()
        D = self.out.shape[-1]
        den = self.buf[..., D]
        inv = torch.where(den > 0, 1.0 / den, torch.zeros_like(den))
        out = self.buf[..., :D] * inv.unsqueeze(-1)
        lse = self.m_safe + torch.log(den)  # -inf where every rank was empty
        return out.to(self.out.dtype), lse


def start_merge(out: Tensor, lse: Tensor, group=None, merge: str = "gather") -> _Pending:
    """Issue the cross-rank merge of this rank's partial ``(out (..., D), lse (...))`` asynchronously.

    Every rank of ``group`` must call it, in the same order. With one rank (or
    no initialised process group) it is the identity.
    """
    if merge not in MERGES:
        raise ValueError(f"merge must be one of {MERGES}, got {merge!r}")
    if out.shape[:-1] != lse.shape:
        raise ValueError(f"start_merge: out {tuple(out.shape)} and lse {tuple(lse.shape)} do not match")
    world = _world(group)
    if world == 1:
        return _Done(out, lse)
    if merge == "gather":
        return _GatherMerge(out, lse, group, world)
    return _ReduceMerge(out, lse, group)


def merge_across_ranks(out: Tensor, lse: Tensor, group=None, merge: str = "gather") -> tuple[Tensor, Tensor]:
    """Blocking version of :func:`start_merge`: the exact merge of all ranks' partials, on every rank."""
    return start_merge(out, lse, group, merge).wait()


def _pipelined(pieces: list, compute: Callable, group, merge: str, cat_dim: int) -> tuple[Tensor, Tensor]:
    """compute(piece) -> (out, lse); issue each piece's merge async while computing the next."""
    pending: list[_Pending] = []
    for piece in pieces:
        o, l = compute(piece)
        if pending:
            pending[-1].advance()  # reduce: stage 2 of the previous piece, after this compute
        pending.append(start_merge(o, l, group, merge))
    results = [p.wait() for p in pending]
    if len(results) == 1:
        return results[0]
    return (torch.cat([r[0] for r in results], dim=cat_dim), torch.cat([r[1] for r in results], dim=cat_dim))
