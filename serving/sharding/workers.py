"""Launch a sequence-sharded KV context on a group of Ray actors.

``ShardedKV.create(k_pages, v_pages, ...)`` starts ``num_workers`` actors
(:class:`ShardWorker`), asks each for its free device memory and GPU id, plans
contiguous page ranges (``serving.sharding.plan.plan_placement``: proportional to
free memory, chain ordered by the GPU link topology that rank 0 reads with
``nvidia-smi topo -m``), forms a ``torch.distributed`` process group among the
actors (NCCL on GPUs, gloo on CPU; ``NCCL_NVLS_ENABLE=0``) and ships each
actor its page range of every layer.

``ShardedKV.attend(q, selected_pages)`` sends q and the *global* selection to
every actor; each restricts the selection to its range, attends locally and
joins the exact cross-rank merge (``serving.sharding.attention``); every actor
ends with the same result and rank 0 returns it. That is one Ray round trip
per call: fine as an API and for tests, too slow to drive a decode loop layer
by layer from the driver. A serving deployment would run the whole model step
inside the actors (each rank has the merged output, so each can run the rest
of the layer itself) and only send tokens through Ray.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence

import torch

from agentctx.kernels.kv_quant import QuantPages
from agentctx.serving.sharding.attention import KVShard, Pool, pool_shape, pool_slice, pool_to
from agentctx.serving.sharding.plan import ShardPlan, WorkerInfo, plan_placement
from agentctx.serving.sharding.topology import link_cost_matrix, parse_nvidia_smi_topo

__all__ = ["ShardWorker", "ShardedKV"]

log = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class ShardWorker:
    """One rank: holds a page range of every layer and runs its part of attention.

    Used as a Ray actor (``ray.remote(ShardWorker)``); plain methods so it can
    also be driven in-process.
    """

    def __init__(self, rank: int, world: int, use_gpu: bool = False, num_threads: int = 1):
        os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink SHARP multicast stays off (see KINDS.md of the lab machines)
        if num_threads:
            torch.set_num_threads(num_threads)
        self.rank, self.world, self.use_gpu = rank, world, use_gpu
        if use_gpu:
            if not torch.cuda.is_available():
                raise RuntimeError(f"ShardWorker rank {rank}: use_gpu=True but CUDA is not available")
            self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.shard: KVShard | None = None

    # ---------------------------------------------------------------- setup
    def info(self, want_topology: bool = False) -> dict:
        """Host, node ip, GPU id and free memory of this rank (and nvidia-smi topology text if asked)."""
        try:
            import ray

            ip = ray.util.get_node_ip_address()
            gpu_ids = list(ray.get_gpu_ids()) if self.use_gpu else []
        except Exception:  # not inside Ray
            ip, gpu_ids = "127.0.0.1", []
        # Ray reports physical indices (as nvidia-smi numbers them, for identical GPUs); a UUID
        # in CUDA_VISIBLE_DEVICES gives no index, and placement then keeps rank order.
        gpu_ids = [int(g) for g in gpu_ids if str(g).isdigit()]
        out = {"rank": self.rank, "host": socket.gethostname(), "ip": ip, "device": None, "free_bytes": None,
               "topology": None}
        if self.use_gpu:
            free, _total = torch.cuda.mem_get_info(self.device)
            out["free_bytes"] = int(free)
            out["device"] = gpu_ids[0] if gpu_ids else self.device.index
            exe = shutil.which("nvidia-smi")
            if want_topology and exe:
                try:
                    out["topology"] = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                                                     timeout=20, check=True).stdout
                except (OSError, subprocess.SubprocessError):
                    pass
        return out

    def free_port(self) -> int:
        return _free_port()

    def init_group(self, init_method: str, timeout_s: float = 120.0) -> bool:
        import torch.distributed as dist

        backend = "nccl" if self.use_gpu else "gloo"
        kw = {"device_id": self.device} if self.use_gpu else {}
        dist.init_process_group(backend, init_method=init_method, rank=self.rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=timeout_s), **kw)
        return True

    def load(self, page_start: int, page_stop: int, k_pages: Mapping[int, Pool],
             v_pages: Mapping[int, Pool], slot_lens: torch.Tensor) -> int:
        """Take this rank's pages (S_local, P, Hkv, D) per layer, float or quantised with their
        scales; returns the bytes held."""
        import torch.distributed as dist

        k = {int(l): pool_to(t, self.device) for l, t in k_pages.items()}
        v = {int(l): pool_to(t, self.device) for l, t in v_pages.items()}
        group = dist.group.WORLD if dist.is_initialized() else None
        self.shard = KVShard(page_start, page_stop, k, v, slot_lens.to(self.device, torch.int32), group=group)
        return sum(t.nbytes for t in (*k.values(), *v.values()))  # QuantPages.nbytes counts the scales

    # ---------------------------------------------------------------- work
    def attend(self, layer: int, q: torch.Tensor, selected, scale: float | None = None,
               softcap: float | None = None, impl: str = "auto", merge: str = "gather", chunks: int = 1,
               chunk_dim: str = "heads", return_result: bool = True):
        """Join one sharded attention; returns (out, lse) on CPU if ``return_result`` else None."""
        if self.shard is None:
            raise RuntimeError(f"ShardWorker rank {self.rank}: no pages loaded")
        q = q.to(self.device)
        sel = self.shard.select(selected, batch=q.shape[0])
        with torch.inference_mode():
            out, lse = self.shard.attend(layer, q, sel, scale, softcap, impl=impl, merge=merge, chunks=chunks,
                                         chunk_dim=chunk_dim)
        return (out.cpu(), lse.cpu()) if return_result else None

    def close(self) -> bool:
        import torch.distributed as dist

        self.shard = None
        if dist.is_initialized():
            dist.destroy_process_group()
        return True


class ShardedKV:
    """Driver handle of one context sharded by sequence over a Ray actor group."""

    def __init__(self, actors: list, plan: ShardPlan, layers: tuple[int, ...], head_dim: int, dtype: torch.dtype):
        self.actors = actors
        self.plan = plan
        self.layers = layers
        self.head_dim = head_dim
        self.dtype = dtype
        self._closed = False

    @classmethod
    def create(
        cls,
        k_pages: Pool | Mapping[int, Pool],
        v_pages: Pool | Mapping[int, Pool],
        slot_lens: torch.Tensor | None = None,
        num_workers: int = 2,
        use_gpu: bool = False,
        placement: str = "memory",
        reserve_bytes: int = 2 << 30,
        actor_options: dict | None = None,
        init_timeout_s: float = 120.0,
        q_dtype: torch.dtype | None = None,
    ) -> "ShardedKV":
        """Start the actors, plan placement, form the process group and load the pages.

        Args:
            k_pages, v_pages: (S, P, Hkv, D) of one layer (layer id 0), or a
                dict layer -> (S, P, Hkv, D) for several layers; float tensors or
                ``QuantPages`` (fp8 / int8 with scales: the same bytes the engine and the store
                hold, each rank's slice of the scales travelling with its pages).
            slot_lens: (S,) int32 valid tokens per page (default: all full).
            num_workers: ranks (one GPU each with ``use_gpu``).
            placement: "memory" or "equal" (see ``plan_placement``).
            reserve_bytes: per-GPU memory kept free for workspaces.
            actor_options: extra ``.options(...)`` for the actors; default
                ``num_cpus=0`` and ``num_gpus=1 if use_gpu else 0``.
            q_dtype: the dtype queries are sent in (default: the pages' float dtype; for
                quantised pages bf16 on GPUs, float32 on CPU).
        """
        import ray

        if not isinstance(k_pages, Mapping):
            k_pages, v_pages = {0: k_pages}, {0: v_pages}
        layers = tuple(sorted(k_pages))
        first = k_pages[layers[0]]
        shape = pool_shape(first)
        S, P, Hkv, D = shape
        quant = isinstance(first, QuantPages)
        for l in layers:
            for name, p in (("k", k_pages[l]), ("v", v_pages[l])):
                if pool_shape(p) != shape or isinstance(p, QuantPages) != quant:
                    raise ValueError(f"ShardedKV.create: layer {l} {name} pages have shape {pool_shape(p)} "
                                     f"({'quantised' if isinstance(p, QuantPages) else 'float'}), expected "
                                     f"{shape} ({'quantised' if quant else 'float'}) like layer {layers[0]}'s k")
                if quant:
                    p.check(f"ShardedKV.create: layer {l} {name} pages")
        if q_dtype is None:
            q_dtype = (torch.bfloat16 if use_gpu else torch.float32) if quant else first.dtype
        if slot_lens is None:
            slot_lens = torch.full((S,), P, dtype=torch.int32)
        slot_lens = slot_lens.to("cpu", torch.int32)
        opts = {"num_cpus": 0, "num_gpus": 1 if use_gpu else 0}
        opts.update(actor_options or {})
        remote_cls = ray.remote(ShardWorker)
        actors = [remote_cls.options(**opts).remote(r, num_workers, use_gpu) for r in range(num_workers)]
        try:
            infos = ray.get([a.info.remote(want_topology=(r == 0)) for r, a in enumerate(actors)])
            workers = [WorkerInfo(rank=i["rank"], device=i["device"], free_bytes=i["free_bytes"], node=i["ip"])
                       for i in infos]
            costs = None
            if infos[0]["topology"]:
                try:
                    costs = link_cost_matrix(parse_nvidia_smi_topo(infos[0]["topology"]))
                except ValueError as exc:
                    log.warning("ShardedKV: could not parse nvidia-smi topology (%s); keeping rank order", exc)
            page_bytes = sum(p.nbytes for l in layers for p in (k_pages[l], v_pages[l])) // max(S, 1)
            plan = plan_placement(S, workers, page_bytes, link_costs=costs,
                                  reserve_bytes=reserve_bytes if use_gpu else 0, policy=placement)
            port = ray.get(actors[0].free_port.remote())
            init = f"tcp://{infos[0]['ip']}:{port}"
            ray.get([a.init_group.remote(init, init_timeout_s) for a in actors])
            loads = []
            for r, a in enumerate(actors):
                s0, s1 = plan.ranges[r]
                kr = {l: pool_to(pool_slice(k_pages[l], 0, s0, s1), "cpu") for l in layers}
                vr = {l: pool_to(pool_slice(v_pages[l], 0, s0, s1), "cpu") for l in layers}
                loads.append(a.load.remote(s0, s1, kr, vr, slot_lens[s0:s1].clone()))
            ray.get(loads)
        except BaseException:
            for a in actors:
                ray.kill(a)
            raise
        return cls(actors, plan, layers, D, q_dtype)

    def attend_with_lse(
        self,
        q: torch.Tensor,
        selected_pages: Sequence[int] | Sequence[Sequence[int]] | None = None,
        layer: int | None = None,
        scale: float | None = None,
        softcap: float | None = None,
        impl: str = "auto",
        merge: str = "gather",
        chunks: int = 1,
        chunk_dim: str = "heads",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of q (B, Tq, Hq, D) over the selected *global* pages: (out, lse) on CPU.

        selected_pages: None (all), one list for every row, or one list per row.
        layer: defaults to the only layer (or the first one).
        """
        import ray

        if self._closed:
            raise RuntimeError("ShardedKV is closed")
        if q.dim() != 4:
            raise ValueError(f"ShardedKV.attend: q must be (B, Tq, Hq, D), got {tuple(q.shape)}")
        layer = self.layers[0] if layer is None else layer
        if layer not in self.layers:
            raise ValueError(f"ShardedKV.attend: layer {layer} not loaded (have {self.layers})")
        if isinstance(selected_pages, torch.Tensor):
            selected_pages = selected_pages.tolist()
        if selected_pages is not None:
            flat = [p for row in selected_pages for p in (row if isinstance(row, (list, tuple, range)) else [row])]
            bad = [p for p in flat if not 0 <= int(p) < self.plan.num_pages]
            if bad:
                raise ValueError(f"ShardedKV.attend: page ids {bad[:5]} outside [0, {self.plan.num_pages})")
            selected_pages = [list(r) if isinstance(r, (list, tuple, range)) else r for r in selected_pages]
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        q_ref = ray.put(q.to(self.dtype).cpu())
        futures = [a.attend.remote(layer, q_ref, selected_pages, scale, softcap, impl, merge, chunks, chunk_dim,
                                   r == 0) for r, a in enumerate(self.actors)]
        results = ray.get(futures)
        return results[0]

    def attend(self, q: torch.Tensor, selected_pages=None, **kw) -> torch.Tensor:
        """Like :meth:`attend_with_lse`, returning only out (B, Tq, Hq, D)."""
        return self.attend_with_lse(q, selected_pages, **kw)[0]

    def close(self) -> None:
        import ray

        if self._closed:
            return
        self._closed = True
        try:
            ray.get([a.close.remote() for a in self.actors], timeout=30)
        except Exception as exc:  # a dead actor must not keep the others alive
            log.warning("ShardedKV.close: %s", exc)
        for a in self.actors:
            ray.kill(a)

    def __enter__(self) -> "ShardedKV":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
