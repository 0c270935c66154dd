"""The three peers of the session benchmark, run on the same model and the same inputs.

* :class:`NaivePeer` -- no sharing: every query re-prefills the whole document
  plus its question with transformers' own forward (attention ``sdpa``, HF's
  ``DynamicCache``), then decodes greedily through that cache. The prefill is
  fed in chunks of ``chunk`` tokens (what ``generate(prefill_chunk_size=...)``
  does), so its memory is the KV cache plus one chunk's activations, not an
  N x N mask; ``chunk=0`` feeds the whole sequence at once.
* :class:`SharedPeer` in ``dense`` mode -- one shared prefill with our
  :class:`serving.runner.model_runner.ModelRunner`, then every query decodes with
  dense attention over all cached pages (``pages=None``: what prefix caching
  gives).
* :class:`SharedPeer` in ``select`` mode (agentctx) -- the same shared
  prefill; each query attends only to the pages a selector returns (sink page
  + recent window + chosen pages, up to a budget).

Selectors: :func:`oracle_random_pages` (the needle's page(s), known from where
it was planted, plus random pages up to the budget -- a stand-in used where
no retrieval stack is installed) and :class:`RetrievalSelector` (the real
``retrieval`` package: embeddings + index, CPU).

Timing: TTFT is measured from the moment the query is submitted (selection
included) until the first greedy token is known on the host; decode time
covers the remaining forwards. All peers decode exactly ``max_new_tokens``
greedy tokens unless a stop id is produced.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from typing import Callable, Sequence

import torch

from agentctx.serving.engine.reference_sampling import greedy_decode

from .workloads import QueryRun

__all__ = [
    "NaivePeer",
    "SharedPeer",
    "AttentionTimer",
    "oracle_random_pages",
    "mandatory_pages",
    "RetrievalSelector",
    "sync",
    "is_oom",
    "kernel_decode_attention",
]

ORACLE_LABEL = "oracle+random selection (retrieval quality measured separately on CPU)"
RETRIEVAL_LABEL = "retrieval selection (MiniLM embeddings + index, retrieval.plan)"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(exc: BaseException) -> bool:
    """True for CUDA/CPU out-of-memory errors (the types differ across torch versions)."""
    if isinstance(exc, MemoryError):
        return True
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


# ---------------------------------------------------------------------------- selection
def mandatory_pages(num_pages: int, num_tokens: int, page_size: int, sink_pages: int, recent_tokens: int) -> set[int]:
    """Sink pages and the pages covering the last ``recent_tokens`` document tokens."""
    pages = set(range(min(sink_pages, num_pages)))
    if recent_tokens > 0:
        first = max(0, num_tokens - recent_tokens) // page_size
        pages.update(range(first, num_pages))
    return pages


def _page_len(p: int, num_pages: int, num_tokens: int, page_size: int) -> int:
    return num_tokens - (num_pages - 1) * page_size if p == num_pages - 1 else page_size


def oracle_random_pages(
    num_pages: int,
    num_tokens: int,
    page_size: int,
    needle_pages: Sequence[int],
    fraction: float,
    rng: random.Random,
    sink_pages: int = 1,
    recent_tokens: int = 256,
) -> tuple[list[int], int]:
    """Sink + recent + needle page(s) + random pages until ``fraction`` of the tokens.

    The budget never drops below the mandatory pages, so at small contexts the
    attended share can exceed ``fraction`` (the caller reports the real share).
    Returns (sorted pages, attended tokens).
    """
    chosen = mandatory_pages(num_pages, num_tokens, page_size, sink_pages, recent_tokens)
    chosen.update(p for p in needle_pages if 0 <= p < num_pages)
    budget_pages = max(len(chosen), math.ceil(fraction * num_tokens / page_size))
    if fraction >= 1.0:
        chosen = set(range(num_pages))
    elif budget_pages > len(chosen):
        rest = [p for p in range(num_pages) if p not in chosen]
        chosen.update(rng.sample(rest, min(len(rest), budget_pages - len(chosen))))
    pages = sorted(chosen)
    return pages, sum(_page_len(p, num_pages, num_tokens, page_size) for p in pages)


class RetrievalSelector:
    """Pages from the real retrieval stack (needs sentence-transformers + faiss: CPU path only)."""

    label = RETRIEVAL_LABEL

    def __init__(self, text: str, offsets, page_size: int, sink_pages: int = 1, recent_tokens: int = 256):
        import agentctx.retrieval as retrieval  # noqa: F401 - lazy: heavy deps

        t0 = time.perf_counter()
        self.index = retrieval.DocumentIndex(text, offsets, page_size=page_size)
        self.build_s = time.perf_counter() - t0
        self.page_size = page_size
        self.sink_pages = sink_pages
        self.recent_tokens = recent_tokens

    def select(self, question: str, fraction: float) -> tuple[list[int], int]:
        import agentctx.retrieval as retrieval

        n_pages, last = self.index.num_pages, self.index.last_page_len
        n_tokens = (n_pages - 1) * self.page_size + last
        if fraction >= 1.0:
            return list(range(n_pages)), n_tokens
        recent_pages = len(mandatory_pages(n_pages, n_tokens, self.page_size, 0, self.recent_tokens))
        floor = (self.sink_pages + recent_pages + 1) * self.page_size  # at least one retrieved page
        policy = retrieval.SelectionPolicy(
            page_size_tokens=self.page_size,
            sink_pages=self.sink_pages,
            recent_tokens=self.recent_tokens,
            top_k_pages=None,
            budget_tokens=max(math.ceil(fraction * n_tokens), floor),
        )
        plan = retrieval.plan(question, self.index, n_pages, last, policy)
        return list(plan.pages), plan.attended_tokens


# ---------------------------------------------------------------------------- attention timer
class AttentionTimer:
    """Times every ``attend_selected`` call inside the model's forward while active.

    Wraps the name that :mod:`serving.runner.model_runner` resolves at call time (no
    source change). On CUDA a pair of events brackets each call, so the time
    includes any launch gap on the GPU timeline but not other layers' work.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._pairs: list = []
        self._mod = None
        self._orig = None

    def __enter__(self) -> "AttentionTimer":
        import agentctx.serving.runner.attention as mr  # the eager hook calls attend_selected from here

        self._mod, self._orig = mr, mr.attend_selected
        orig = self._orig

        def timed(*args, **kwargs):
            if self.device.type == "cuda":
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                out = orig(*args, **kwargs)
                e1.record()
                self._pairs.append((e0, e1))
            else:
                t0 = time.perf_counter()
                out = orig(*args, **kwargs)
                self._pairs.append(time.perf_counter() - t0)
            return out

        mr.attend_selected = timed
        return self

    def __exit__(self, *exc) -> None:
        self._mod.attend_selected = self._orig

    def take(self) -> float:
        """Seconds spent in attention since the last take()."""
        pairs, self._pairs = self._pairs, []
        if not pairs:
            return 0.0
        if self.device.type == "cuda":
            pairs[-1][1].synchronize()
            return sum(a.elapsed_time(b) for a, b in pairs) / 1e3
        return float(sum(pairs))


# ---------------------------------------------------------------------------- peers
class SharedPeer:
    """Dense reuse (``pages=None``) or agentctx (selected pages) over one shared prefill."""

    def __init__(self, runner, device: torch.device):
        self.runner = runner
        self.device = device

    def prefill(self, doc_ids: torch.Tensor):
        sync(self.device)
        t0 = time.perf_counter()
        doc = self.runner.prefill(doc_ids, progress=False)
        sync(self.device)
        return doc, time.perf_counter() - t0

    @torch.inference_mode()
    def run_query(
        self,
        doc,
        q_ids: list[int],
        select: Callable[[], tuple[list[int] | None, int]],
        max_new_tokens: int,
        stop_ids: set[int],
        timer: AttentionTimer | None = None,
    ) -> tuple[QueryRun, object]:
        """One query; returns its record and the query's tail (the agent's private KV)."""
        runner = self.runner
        sync(self.device)
        t0 = time.perf_counter()
        pages, attended = select()
        t_sel = time.perf_counter() - t0
        tail = runner.new_tail(doc)
        if timer is not None:
            timer.take()
        marks: dict = {}

        def first_token() -> None:  # the prompt's forward and its token pick are done
            marks["t1"] = time.perf_counter()
            marks["attn_ttft"] = timer.take() if timer is not None else None

        tokens = greedy_decode(runner.extend(doc, tail, q_ids, pages),
                               lambda token: runner.extend(doc, tail, [token], pages), max_new_tokens, stop_ids,
                               on_first=first_token)
        t2 = time.perf_counter()
        t1, attn_ttft = marks.get("t1", t2), marks.get("attn_ttft")
        steps = min(len(tokens), max_new_tokens - 1)  # forwards run after the prompt's
        attn_dec = (timer.take() / steps) if (timer is not None and steps) else None
        n_pages = doc.num_pages if pages is None else len(pages)
        run = QueryRun(
            agent=-1, turn=-1, tokens=tokens, ttft_s=t1 - t0, decode_s=t2 - t1, decode_steps=steps,
            select_s=t_sel, attended_tokens=attended, pages_selected=n_pages,
            attn_ttft_s=attn_ttft, attn_decode_s_per_token=attn_dec,
        )
        return run, tail


class NaivePeer:
    """transformers' own forward, re-prefilling document + question for every query."""

    def __init__(self, model, device: torch.device, chunk: int):
        self.model = model
        self.device = device
        self.chunk = chunk

    @torch.inference_mode()
    def run_query(self, doc_ids: torch.Tensor, q_ids: list[int], max_new_tokens: int, stop_ids: set[int]) -> QueryRun:
        model = self.model
        ids = torch.cat([doc_ids.view(-1), torch.as_tensor(q_ids, dtype=torch.long)]).to(self.device).view(1, -1)
        n = ids.shape[1]
        chunk = self.chunk if self.chunk > 0 else n
        saved = model.config._attn_implementation
        model.config._attn_implementation = "sdpa"
        state: dict = {"cache": None, "out": None}

        def forward(input_ids: torch.Tensor) -> torch.Tensor:
            out = model(input_ids=input_ids, past_key_values=state["cache"], use_cache=True, logits_to_keep=1)
            state["cache"], state["out"] = out.past_key_values, out
            return out.logits[0, -1]

        marks: dict = {}
        try:
            with warnings.catch_warnings():
                # transformers >= 5.2x renames past_key_values -> cache; 5.17 only knows the old name.
                warnings.simplefilter("ignore", FutureWarning)
                sync(self.device)
                t0 = time.perf_counter()
                for s in range(0, n, chunk):
                    logits = forward(ids[:, s : s + chunk])
                tokens = greedy_decode(logits, lambda token: forward(torch.tensor([[token]], device=self.device)),
                                       max_new_tokens, stop_ids,
                                       on_first=lambda: marks.setdefault("t1", time.perf_counter()))
                steps = min(len(tokens), max_new_tokens - 1)
                t2 = time.perf_counter()
                t1 = marks.get("t1", t2)
        finally:
            model.config._attn_implementation = saved
            state.clear()  # free the cache now
            del ids
        return QueryRun(agent=-1, turn=-1, tokens=tokens, ttft_s=t1 - t0, decode_s=t2 - t1, decode_steps=steps,
                        attended_tokens=n - len(q_ids), pages_selected=0)


# ---------------------------------------------------------------------------- kernel alone
def kernel_decode_attention(runner, doc, pages: list[int] | None, reps: int = 20) -> dict:
    """Time ``attend_selected`` alone for one decode token (every global layer, same page table);
    a document held quantised (``model.kv_dtype`` fp8 / int8) is read by ``attend_selected_quant``.

    On CUDA the per-token layer loop is captured in a CUDA graph and replayed,
    which removes Python launch overhead and leaves device time; if capture
    fails the eager loop time (events) is reported instead. Both are returned
    when available.
    """
    from agentctx.kernels import attend_selected, attend_selected_quant
    from agentctx.kernels.attend_selected import QUANT_IMPLS

    device = runner.device
    layers = runner.layout.global_layers
    cfg = runner.config
    hq, d = cfg.num_attention_heads, runner.layout.head_dim
    table, count = runner.block_table(doc, pages)
    slot_lens = doc.slot_lens()
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, 1, hq, d, device=device, dtype=torch.float32, generator=g).to(runner.dtype)
    scale = 1.0 / math.sqrt(d)

    attend = attend_selected_quant if getattr(doc, "quantized", False) else attend_selected
    impl = runner.kernel_impl
    if attend is attend_selected_quant and impl not in QUANT_IMPLS:
        impl = "auto"  # a float-only impl (flash-attn): the quantised pages take Triton or the reference
    pools = [doc.pool(layer) for layer in layers]

    def step():
        for k, v in pools:
            attend(q, k, v, table, count, slot_lens, scale, impl=impl)

    with torch.inference_mode():
        for _ in range(2):
            step()
        sync(device)
        res: dict = {"layers": len(layers), "pages": int(table.shape[1])}
        if device.type != "cuda":
            t0 = time.perf_counter()
            for _ in range(max(1, reps // 4)):
                step()
            res["eager_s"] = (time.perf_counter() - t0) / max(1, reps // 4)
            res["device_s"] = res["eager_s"]
            res["method"] = "cpu wall"
            return res
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            step()
        e1.record()
        e1.synchronize()
        res["eager_s"] = e0.elapsed_time(e1) / 1e3 / reps
        try:
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                step()
            graph.replay()
            sync(device)
            e0.record()
            for _ in range(reps):
                graph.replay()
            e1.record()
            e1.synchronize()
            res["graph_s"] = e0.elapsed_time(e1) / 1e3 / reps
            res["device_s"] = res["graph_s"]
            res["method"] = "cuda graph replay"
            del graph
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager timing
            res["graph_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            res["device_s"] = res["eager_s"]
            res["method"] = "eager loop (cuda events)"
    return res
