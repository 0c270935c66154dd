"""Quality of quantised store pages on real weights and real text (issue 30, phase 2).

The embedded Gemma 3 270M on CPU in float32, in-process (no Ray): for each document, prefill the
first ``--context-tokens`` tokens once, then for each page format put every page through the
store's encoding (``serving.serve.replica.encode_store_pages`` -> ``kv_store.codec``
``decode_payload``: the bytes a replica would publish and load back) and rebuild the document's
KV with ``DocKV.from_tensors``; the sliding-window state stays float32, as in the store. Against
it, attending every page:

* the next ``--score-tokens`` tokens of the real text, teacher-forced (``ModelRunner.extend`` with
  ``all_logits``): per-token log-likelihood -> perplexity, its ratio to the float32 pages'
  (target: within 0.5 %), and the top-1 agreement with the float32 run at each scored position;
* ``--greedy-tokens`` tokens generated greedily after the first continuation token (no stop
  tokens): the share of positions equal to the float32 run's, and the first position that differs.

"mean abs dNLL" is the mean per-token |NLL - NLL(fp32)| (nats): a perplexity ratio can hide
errors that cancel.

Documents: ``bench/devsets/contracts/*.txt`` joined in name order (licences and EULAs) and
``bench/devsets/selection/sources/gnu-manuals.txt.gz`` (GNU info manuals) from its start.

    .venv/bin/python bench/bench_kv_quality.py                         # 8K context
    .venv/bin/python bench/bench_kv_quality.py --context-tokens 8192,16384

About 6 minutes per context length on an idle 2-core box (8K and 16K alike: the prefill is most
of it); three times that beside a running test suite. Results: docs/KERNELS.md, "Phase 2".

Writes a markdown table to stdout and, with ``--out FILE``, the rows as JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from agentctx.kv_store.codec import PagePayload, decode_payload, encode_tensor  # noqa: E402
from agentctx.serving.model_loader import load_model  # noqa: E402
from agentctx.serving.runner.model_runner import ModelRunner  # noqa: E402
from agentctx.serving.runner.paged_kv import DocKV  # noqa: E402
from agentctx.serving.serve.replica import encode_store_pages  # noqa: E402

# name -> (kv_dtype setting, (K, V) granularity; None = kv_quant's default)
FORMATS = {
    "fp32": ("auto", (None, None)),
    "bf16": ("bf16", (None, None)),
    "fp8 default (token_head / token_head)": ("fp8_e4m3", (None, None)),
    "int8 default (channel / token_head)": ("int8", (None, None)),
    "fp8 page_head / page_head": ("fp8_e4m3", ("page_head", "page_head")),
    "int8 page_head / page_head": ("int8", ("page_head", "page_head")),
}
# Pages held quantised by the engine itself (model.kv_dtype on the device, serving/runner/quant_kv.py):
# the document is prefilled with the setting, so later chunks already attend to quantised pages
# (the error compounds over the document, unlike pages quantised once at publish).
DEVICE_FORMATS = {
    "int8 on the device (prefill reads int8 pages)": "int8",
    "fp8 on the device (prefill reads fp8 pages)": "fp8_e4m3",
}
CHUNK = 128  # scored tokens per forward: bounds the (T, vocab) logits to ~130 MB


def documents() -> dict[str, str]:
    contracts = sorted((ROOT / "bench/devsets/contracts").glob("*.txt"))
    gnu = ROOT / "bench/devsets/selection/sources/gnu-manuals.txt.gz"
    return {"contracts": "\n\n".join(p.read_text() for p in contracts),
            "gnu-manuals": gzip.open(gnu, "rt").read()}


def stored_doc(runner: ModelRunner, ref: DocKV, kv_dtype: str, granularity) -> tuple[DocKV, int]:
    """The document's KV after the store's encode/decode for this format; and bytes per page."""
    pages = [ref.page_tensor(i) for i in range(ref.num_pages)]
    stored = encode_store_pages(pages, list(range(len(pages))), ref.num_tokens, ref.page_size, kv_dtype, granularity)
    payloads = [p if isinstance(p, PagePayload) else encode_tensor(p) for p in stored]
    loaded = [decode_payload(p, copy=True).to(runner.dtype) for p in payloads]
    doc = DocKV.from_tensors(runner.layout, ref.page_size, ref.num_tokens, loaded, ref.window_tensor(),
                             device=runner.device)
    return doc, payloads[0].nbytes  # page 0 is full: the per-page size of every full page


def contexts(tok, docs: str, context_tokens: str, score_tokens: int):
    """(document name, context length, context ids, continuation ids) for each named document and
    length: the first N tokens, then the next ``score_tokens + 1``; too short a document is skipped."""
    texts = documents()
    for name in docs.split(","):
        ids = tok(texts[name], add_special_tokens=True)["input_ids"]
        for n_ctx in (int(x) for x in context_tokens.split(",")):
            need = n_ctx + score_tokens + 1
            if len(ids) < need:
                print(f"# {name}: {len(ids)} tokens < {need}; skipped at {n_ctx}", file=sys.stderr)
                continue
            yield name, n_ctx, ids[:n_ctx], ids[n_ctx:need]


@torch.inference_mode()
def score(runner: ModelRunner, doc: DocKV, cont: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(NLL, argmax) of cont[1:] given the document and the continuation before each token."""
    tail = runner.new_tail(doc)
    nll, top = [], []
    for s in range(0, len(cont) - 1, CHUNK):
        ids = cont[s : min(s + CHUNK, len(cont) - 1)]
        logits = runner.extend(doc, tail, ids, None, all_logits=True).float()
        target = torch.tensor(cont[s + 1 : s + 1 + len(ids)])
        nll.append(-torch.log_softmax(logits, -1).gather(1, target[:, None])[:, 0])
        top.append(logits.argmax(-1))
    return torch.cat(nll), torch.cat(top)


@torch.inference_mode()
def greedy(runner: ModelRunner, doc: DocKV, first: int, n: int) -> list[int]:
    tail = runner.new_tail(doc)
    logits = runner.extend(doc, tail, [first], None)
    out = []
    for _ in range(n):
        out.append(int(logits.argmax()))
        logits = runner.extend(doc, tail, [out[-1]], None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context-tokens", default="8192", help="comma list of context lengths (tokens)")
    ap.add_argument("--score-tokens", type=int, default=512)
    ap.add_argument("--greedy-tokens", type=int, default=64)
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--docs", default="contracts,gnu-manuals")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma list of: " + ", ".join([*FORMATS, *DEVICE_FORMATS]))
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    torch.manual_seed(0)
    loaded = load_model(None, dtype=torch.float32, device="cpu")
    runner = ModelRunner(loaded, page_size=args.page_size, prefill_chunk_tokens=1024, query_mode="eager")
    device_runners = {fmt: ModelRunner(loaded, page_size=args.page_size, prefill_chunk_tokens=1024,
                                       query_mode="eager", kv_dtype=kv)
                      for fmt, kv in DEVICE_FORMATS.items() if fmt in args.formats.split(",")}
    rows = []
    for name, n_ctx, ctx, cont in contexts(loaded.tokenizer, args.docs, args.context_tokens, args.score_tokens):
        t0 = time.perf_counter()
        ref = runner.prefill(ctx, progress=False)
        print(f"# {name} {n_ctx}: prefill {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        base_nll = base_top = base_gen = None
        for fmt in args.formats.split(","):
            t0 = time.perf_counter()
            if fmt in device_runners:  # prefilled by the engine with quantised pages
                r = device_runners[fmt]
                doc = r.prefill(ctx, progress=False)
                held = [*doc.k_pages.values(), *doc.v_pages.values(),
                        *doc.k_scales.values(), *doc.v_scales.values()]
                page_bytes = sum(t.numel() * t.element_size() for t in held) // max(1, doc.num_pages)
            else:
                r = runner
                doc, page_bytes = stored_doc(runner, ref, *FORMATS[fmt])
            nll, top = score(r, doc, cont)
            gen = greedy(r, doc, cont[0], args.greedy_tokens)
            if base_nll is None:
                base_nll, base_top, base_gen = nll, top, gen
            same = [a == b for a, b in zip(gen, base_gen)]
            row = {"doc": name, "context_tokens": n_ctx, "scored_tokens": len(nll), "format": fmt,
                   "page_bytes": page_bytes, "ppl": math.exp(nll.mean().item()),
                   "ppl_ratio": math.exp((nll.mean() - base_nll.mean()).item()),
                   "nll_mad": (nll - base_nll).abs().mean().item(),
                   "top1_agree": (top == base_top).float().mean().item(),
                   "greedy_agree": sum(same) / len(same),
                   "first_diff": same.index(False) if False in same else None,
                   "s": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
        del ref
    print("| doc | context | format | bytes/page | ppl | ppl ratio | mean abs dNLL | top-1 agree (scored) | "
          "greedy agree | first diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['doc']} | {r['context_tokens']} | {r['format']} | {r['page_bytes']:,} | {r['ppl']:.3f} | "
              f"{r['ppl_ratio']:.4f} | {r['nll_mad']:.4f} | {r['top1_agree']:.3f} | {r['greedy_agree']:.3f} | "
              f"{'-' if r['first_diff'] is None else r['first_diff']} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
