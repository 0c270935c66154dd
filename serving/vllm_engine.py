"""VLLMEngine: vLLM behind the ``Engine`` interface, in prompt-level mode.

vLLM cannot attend to a chosen set of KV pages, so here an attend plan becomes
prompt text (``serving.prompt_mode``): the selected pages' tokens in document
order with page markers. Reuse across agents comes from vLLM's automatic prefix
caching: the document's prefill is computed once (``prefill``) and every later
prompt that starts with the same pages reads those KV blocks from vLLM's cache.
A dense query (pages=None) is the full document plus the question, which is
exactly the "dense reuse" peer of the benchmarks.

Requests from any thread go into one ``LLMEngine``; a driver thread steps it
(``serving/vllm_driver.py``), so concurrent agents are batched by vLLM's
scheduler. vLLM is optional: importing this module is cheap, constructing the
engine without vLLM raises ``VLLMUnavailableError`` with the install command.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch

from agentctx.serving.engine import Engine, PageLoader
from agentctx.serving.model_loader import DEFAULT_MODEL, ModelLoadError, resolve_model_dir
from agentctx.serving.prompt_mode import PromptPlan, assemble_prompt, copy_choices, page_marker_text, page_runs
from agentctx.serving.tokenize import stop_token_ids, tokenize_document
from agentctx.serving.types import (
    ContextTooLongError,
    GenerateRequest,
    GenerateResult,
    PrefillResult,
    ScoreRequest,
    TokenizedDoc,
)
from agentctx.serving.vllm_driver import _Driver

__all__ = ["VLLMEngine", "VLLMUnavailableError", "vllm_available"]

log = logging.getLogger(__name__)
INSTALL_HINT = "install it in its own environment: bash scripts/setup_vllm.sh (pip install 'agentctx[vllm]')"


class VLLMUnavailableError(RuntimeError):
    """vLLM is not importable in this environment."""


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install is as unavailable as a missing one
        return False
    return True


class _Cancelled(Exception):
    pass


class VLLMEngine(Engine):
    """vLLM (automatic prefix caching) over documents held as token ids."""

    kind = "vllm"
    needs_window = False

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        page_size: int = 256,
        max_context_tokens: int = 1 << 20,
        dtype: str | None = None,
        kv_cache_gib: float = 4.0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.85,
        enforce_eager: bool = True,
        seed: int = 0,
        page_loader: PageLoader | None = None,
        tokenizer: str | os.PathLike | None = None,
    ):
        try:
            from vllm import LLM
        except Exception as exc:  # noqa: BLE001
            raise VLLMUnavailableError(f"vLLM is not installed or does not import ({exc}); {INSTALL_HINT}") from exc
        from transformers import AutoTokenizer

        os.environ["HF_HUB_OFFLINE"] = "1"  # never download: weights and tokenizer are local
        path = resolve_model_dir(model, tokenizer)
        tok_dir = Path(tokenizer).expanduser() if tokenizer else path
        cfg = json.loads((path / "config.json").read_text())
        if not cfg.get("architectures"):
            # Without it vLLM guesses a class and may pick an embedding model.
            raise ModelLoadError(f"{path}/config.json has no 'architectures' entry; vLLM needs it "
                                 f"(e.g. [\"Gemma3ForCausalLM\"])")
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            # vLLM's CPU backend sizes its KV cache from this variable (GiB), read at engine start.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gib:g}")
        limit = _position_limit(cfg)
        self.max_model_len = min(max_model_len or limit, limit)
        self.max_context_tokens = min(max_context_tokens, self.max_model_len)
        self.tokenizer = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
        kwargs = dict(model=str(path), tokenizer=str(tok_dir), dtype=dtype or ("bfloat16" if on_gpu else "float32"),
                      enable_prefix_caching=True, max_model_len=self.max_model_len, seed=seed,
                      enforce_eager=enforce_eager)
        if on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        log.info("vLLM engine for %s ready in %.1f s (max_model_len %d)", path, time.perf_counter() - t0,
                 self.max_model_len)
        self.dtype = kwargs["dtype"]
        self.model_id = DEFAULT_MODEL if (path / "agentctx_converted.json").exists() else f"local:{path.resolve()}"
        self.page_size = page_size
        self.page_loader = page_loader
        self.path = Path(path)
        self._kv_bytes_per_token = _kv_bytes_per_token(cfg, self.dtype)
        self._docs: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.RLock()
        self._stop_ids = stop_token_ids(self.tokenizer, cfg.get("eos_token_id", self.tokenizer.eos_token_id))
        self.stats = {"prefills": 0, "prefill_tokens": 0, "cache_hits": 0, "cache_misses": 0, "loads": 0,
                      "cached_prompt_tokens": 0, "prompt_tokens": 0, "score_recomputes": 0}
        self._driver = _Driver(self.llm.llm_engine)

    @property
    def page_namespace(self) -> str:
        # Store pages of this engine hold token ids, not KV: hash them apart from KV pages.
        return f"{self.model_id}#vllm-tokens"

    def close(self) -> None:
        """Stop vLLM's engine-core process now (otherwise it goes at interpreter exit)."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown()

    # ------------------------------------------------------------------ documents
    def tokenize_document(self, text: str) -> TokenizedDoc:
        doc = tokenize_document(self.tokenizer, text)
        self._check_length(len(doc.token_ids))
        return doc

    def _check_length(self, n: int) -> None:
        if n > self.max_context_tokens:
            raise ContextTooLongError(
                f"document has {n} tokens; the vLLM engine's limit is {self.max_context_tokens} "
                f"(the model's max_model_len {self.max_model_len} bounds it)")

    def prefill(self, context_id: str, doc: TokenizedDoc, progress: bool = True, on_chunk=None, warm: bool = True
                ) -> PrefillResult:
        """Compute the document's KV once into vLLM's prefix cache (a 1-token request over it).

        warm=False only registers the tokens: the first query then pays the prefill (cold TTFT)."""
        self._check_length(len(doc.token_ids))
        t0 = time.perf_counter()
        if on_chunk is not None:  # where it starts (progress rates count from this report)
            on_chunk(0, len(doc.token_ids))
        if warm:
            self._warm(list(doc.token_ids))
            self.stats["prefills"] += 1
            self.stats["prefill_tokens"] += len(doc.token_ids)
        dt = time.perf_counter() - t0
        self._insert(context_id, list(doc.token_ids))
        n = len(doc.token_ids)
        if on_chunk is not None:  # vLLM prefills in one call: one report at the end
            on_chunk(n, n)
        return PrefillResult(context_id, n, -(-n // self.page_size), self.page_size, n * self._kv_bytes_per_token, dt)

    def _warm(self, ids: list[int]) -> None:
        """Put the document in vLLM's prefix cache and check that a later request finds it.

        Seen with vllm-cpu 0.32 and Gemma 3 (sliding-window + global layers): after the first
        computation of a document longer than one prefill chunk, the next request over it
        found nothing cached, while a request after that one did. So a probe request checks
        the hit; on a miss the probe itself was the second computation and one more probe
        confirms it.
        """
        from vllm import SamplingParams

        block = self.llm.llm_engine.vllm_config.cache_config.block_size
        want = max(0, (len(ids) // block) * block - block)
        one = SamplingParams(max_tokens=1, temperature=0.0)
        self._run(ids, one, None)
        for attempt in range(2):
            cached = self._run(ids, one, None)[4]
            if cached >= want:
                return
            log.info("vLLM prefix cache missed the document after computation %d (%d/%d tokens cached)",
                     attempt + 1, cached, want)
        log.warning("vLLM does not keep this document in its prefix cache: every query will recompute it")

    def export(self, context_id: str) -> tuple[int, list[torch.Tensor], torch.Tensor | None]:
        """Pages for the shared store: each page's token ids (int64); vLLM keeps the KV itself."""
        ids = self._lookup(context_id, None)
        P = self.page_size
        return len(ids), [torch.tensor(ids[i : i + P], dtype=torch.int64) for i in range(0, len(ids), P)], None

    def _cached(self, context_id: str) -> list[int] | None:
        with self._lock:
            ids = self._docs.get(context_id)
            if ids is not None:
                self._docs.move_to_end(context_id)
            return ids

    def holds(self, context_id: str) -> bool:
        with self._lock:
            return context_id in self._docs

    def drop(self, context_id: str) -> bool:
        """Forget a context; vLLM frees its cached blocks itself (LRU) once no request uses them."""
        with self._lock:
            return self._docs.pop(context_id, None) is not None

    def cached_bytes(self) -> int:
        with self._lock:
            return sum(len(d) for d in self._docs.values()) * 8

    def describe(self) -> dict:
        return {"engine": self.kind, "device": "cuda" if torch.cuda.is_available() else "cpu", "dtype": self.dtype,
                "kv_bytes_per_token": self._kv_bytes_per_token, "cached_contexts": len(self._docs),
                "cached_bytes": self.cached_bytes(), "max_model_len": self.max_model_len}

    def _insert(self, context_id: str, ids: list[int]) -> None:
        with self._lock:
            self._docs[context_id] = ids
            self._docs.move_to_end(context_id)

    def _from_store(self, num_tokens, pages, window, token_ids) -> list[int]:
        return list(token_ids)  # the pages hold token ids too; the KV lives in vLLM's cache

    # ------------------------------------------------------------------ prompts
    def _marker_ids(self, page: int) -> list[int]:
        return self.tokenizer(page_marker_text(page), add_special_tokens=False)["input_ids"]

    def _plan(self, doc: list[int], pages, prompt: str) -> PromptPlan:
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return assemble_prompt(doc, self.page_size, pages, prompt_ids, self._marker_ids)

    def _copy_choices(self, doc: list[int], pages: list[int]) -> list[str]:
        P = self.page_size
        texts = [self.tokenizer.decode(doc[a * P : (b + 1) * P], skip_special_tokens=True)
                 for a, b in page_runs(sorted(set(pages)))]
        choices = copy_choices(texts)
        if not choices:
            raise ValueError("the copy pages hold no sentence to quote")
        return choices

    # ------------------------------------------------------------------ generation
    def generate(self, req: GenerateRequest, on_text: Callable[[str], None] | None = None) -> GenerateResult:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        self.check_request(req)
        t0 = time.perf_counter()
        doc = self._lookup(req.context_id, req.tenant)
        plan = self._plan(doc, req.pages, req.prompt)
        if len(plan.token_ids) + req.max_new_tokens > self.max_model_len:
            raise ContextTooLongError(f"prompt of {len(plan.token_ids)} tokens + {req.max_new_tokens} new tokens "
                                      f"exceeds max_model_len {self.max_model_len}")
        if req.max_new_tokens == 0:
            return self._result("", [], plan, doc, req, 0, time.perf_counter() - t0, t0, "length")
        structured = None
        if req.constraint == "copy":
            n_pages = -(-len(doc) // self.page_size)
            copy_pages = list(req.copy_pages or req.pages or range(n_pages))
            if any(not 0 <= p < n_pages for p in copy_pages):
                raise ValueError(f"copy_pages out of range for a document of {n_pages} pages")
            structured = StructuredOutputsParams(choice=self._copy_choices(doc, copy_pages))
        elif req.constraint is not None:
            raise ValueError(f"unknown constraint {req.constraint!r} (supported: 'copy')")
        sp = req.sampling
        extra = {} if sp is None else {"top_p": sp.top_p, "top_k": sp.top_k or -1, "min_p": sp.min_p,
                                       "presence_penalty": sp.presence_penalty,
                                       "frequency_penalty": sp.frequency_penalty,
                                       "repetition_penalty": sp.repetition_penalty}
        params = SamplingParams(
            max_tokens=req.max_new_tokens, temperature=req.temperature, seed=req.seed,
            min_tokens=req.min_tokens, ignore_eos=req.ignore_eos,
            stop=list(req.stop) or None, stop_token_ids=sorted(self._stop_ids),
            output_kind=RequestOutputKind.DELTA, structured_outputs=structured, **extra,
        )
        text, ids, finish, ttft, cached = self._run(plan.token_ids, params, on_text)
        self.stats["cached_prompt_tokens"] += cached
        self.stats["prompt_tokens"] += len(plan.token_ids)
        total = time.perf_counter() - t0
        res = self._result(text, ids, plan, doc, req, ttft if ttft is not None else total, total, t0, finish)
        res.timings["cached_prompt_tokens"] = cached
        return res

    def _result(self, text, ids, plan, doc, req, ttft, total, t0, finish) -> GenerateResult:
        n_pages = -(-len(doc) // self.page_size)
        return GenerateResult(
            text=text, token_ids=list(ids), prompt_tokens=len(plan.token_ids) - plan.doc_tokens,
            pages_attended=n_pages if req.pages is None else len(set(req.pages)),
            attended_tokens=plan.doc_tokens, context_tokens=len(doc), ttft_s=ttft, total_s=total,
            finish_reason=finish,
        )

    def score(self, req: ScoreRequest) -> list[float]:
        """Sum (or per-token mean) of option token log-probs after the prompt, from prompt logprobs."""
        from vllm import SamplingParams

        self.check_score_request(req)
        doc = self._lookup(req.context_id, req.tenant)
        base = self._plan(doc, req.pages, req.prompt).token_ids
        jobs = []
        for option in req.options:
            ids = self.tokenizer(option, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"option {option!r} has no tokens")
            jobs.append(ids)
        # Read the cached document prefix (vLLM skips the cache for prompt logprobs by default);
        # the option tokens at the end are never cached blocks unless the same prompt ran before,
        # which _option_logprob detects and then recomputes without the cache.
        scores = []
        results = self._driver.submit_many(
            [(base + ids, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0,
                                         skip_reading_prefix_cache=False, detokenize=False)) for ids in jobs])
        for ids, outs in zip(jobs, results):
            total = _option_logprob(outs[-1].prompt_logprobs, ids)
            if total is None:
                self.stats["score_recomputes"] += 1
                (outs,) = self._driver.submit_many(
                    [(base + ids, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False))])
                total = _option_logprob(outs[-1].prompt_logprobs, ids)
                if total is None:
                    raise RuntimeError("vLLM returned no prompt logprobs for the option tokens")
            scores.append(total / len(ids) if req.per_token else total)
        return scores

    def _run(self, prompt_ids: list[int], params, on_text) -> tuple[str, list[int], str, float | None, int]:
        t0 = time.perf_counter()
        text, ids, finish, ttft, cached = "", [], "length", None, 0
        rid, q = self._driver.submit(prompt_ids, params)
        try:
            while (out := q.get()) is not None:
                if isinstance(out, Exception):
                    raise out
                if out.num_cached_tokens is not None:
                    cached = int(out.num_cached_tokens)
                o = out.outputs[0]
                if o.token_ids and ttft is None:
                    ttft = time.perf_counter() - t0
                ids += list(o.token_ids)
                if o.text:
                    text += o.text
                    if on_text is not None:
                        on_text(o.text)
                if o.finish_reason is not None:
                    finish = "stop" if o.finish_reason == "stop" else "length"
        except BaseException:
            self._driver.abort(rid)
            raise
        return text, ids, finish, ttft, cached


def _option_logprob(prompt_logprobs, option_ids: list[int]) -> float | None:
    """Sum of the logprobs of the last len(option_ids) prompt tokens, or None when vLLM
    did not return them (those tokens came from its prefix cache)."""
    if not prompt_logprobs or len(prompt_logprobs) < len(option_ids):
        return None
    tail = prompt_logprobs[-len(option_ids):]
    total = 0.0
    for entry, tid in zip(tail, option_ids):
        if not entry or tid not in entry:
            return None
        total += float(entry[tid].logprob)
    return total


def _position_limit(cfg: dict) -> int:
    text = cfg.get("text_config", cfg)
    return int(text.get("max_position_embeddings") or 8192)


def _kv_bytes_per_token(cfg: dict, dtype: str) -> int:
    text = cfg.get("text_config", cfg)
    layers = int(text["num_hidden_layers"])
    kv_heads = int(text.get("num_key_value_heads") or text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
    return 2 * layers * kv_heads * head_dim * (4 if dtype == "float32" else 2)
