"""vLLM with prefix caching (the dense-reuse peer) vs agentctx, side by side, real Gemma 3 270M on CPU.

Run in the vLLM venv (bash scripts/setup_vllm.sh):

    .venv-vllm/bin/python bench/bench_vllm.py --tokens 2000,8000,16000 --json bench/results/vllm_cpu.json

Per context length, one synthetic contract (tests/fixtures/contracts.py) with planted
facts; Q needle questions. Peers, in the same process, one after the other:

* ``vllm dense``: VLLMEngine, full document + question; the document is in
  vLLM's automatic prefix cache after the first query (what prefix caching in
  vLLM gives many agents over one document).
* ``vllm prompt 12%``: VLLMEngine in prompt-level mode: the 12% attend plan's
  pages as prompt text (cache hits only up to the first gap).
* ``agentctx dense``: our paged runner over every cached page.
* ``agentctx 12%``: our runner over the same 12% plan (block-selected attention
  over positionally exact cached KV, no recompute).

Cold TTFT: the first question when nothing of the document is cached (vLLM:
prefix cache reset, prefill inside the request; agentctx: prefill + first
query). Warm TTFT: every question once the document is cached (vLLM: after
``VLLMEngine.prefill`` has checked that its prefix cache holds the document).
Decode: ms per generated
token after the first. Needle accuracy: the planted value appears in the
greedy answer. Agreement: greedy tokens identical to ``vllm dense``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="2000,8000,16000", help="approximate context lengths")
    ap.add_argument("--questions", type=int, default=3, help="needle questions per context")
    ap.add_argument("--max-new", type=int, default=16, help="greedy tokens per answer")
    ap.add_argument("--fraction", type=float, default=0.12, help="selection budget of the selected peers")
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--kv-cache-gib", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", default=None)
    return ap.parse_args()


def _row(res, needle_value: str, ref_ids) -> dict:
    n = len(res.token_ids)
    decode = (res.total_s - res.ttft_s) / (n - 1) if n > 1 else float("nan")
    return {"ttft_s": res.ttft_s, "decode_ms_per_token": 1e3 * decode, "tokens": n,
            "needle_hit": needle_value.lower() in res.text.lower(),
            "agree": None if ref_ids is None else list(res.token_ids) == list(ref_ids),
            "attended_tokens": res.attended_tokens, "context_tokens": res.context_tokens,
            "cached_prompt_tokens": res.timings.get("cached_prompt_tokens"), "text": res.text}


def main() -> int:
    args = _parse()
    import torch

    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.types import GenerateRequest
    from agentctx.serving.vllm_engine import VLLMEngine
    from bench.lib.peers import RetrievalSelector
    from tests.fixtures.contracts import generate_contract

    torch.set_num_threads(os.cpu_count() or 1)
    sizes = [int(x) for x in args.tokens.split(",") if x]
    max_len = max(sizes) * 2 + 2048
    t0 = time.perf_counter()
    vllm = VLLMEngine(None, page_size=args.page, kv_cache_gib=args.kv_cache_gib, max_model_len=min(max_len, 32768))
    vllm_load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    local = LocalEngine(None, page_size=args.page, device="cpu")
    local_load_s = time.perf_counter() - t0
    print(f"# loads: vLLM {vllm_load_s:.1f} s, agentctx {local_load_s:.1f} s; {os.cpu_count()} CPUs", flush=True)

    results = []
    for n_target in sizes:
        contract = generate_contract(n_target, num_needles=args.questions, seed=args.seed + n_target,
                                     tokenizer=local.tokenizer)
        doc = local.tokenize_document(contract.text)
        n = len(doc.token_ids)
        selector = RetrievalSelector(contract.text, doc.offsets, args.page)
        qs = [(nd.question, nd.value) for nd in contract.needles[: args.questions]]
        prompts = [f"\nQuestion: {q}\nAnswer:" for q, _ in qs]
        plans = [selector.select(q, args.fraction)[0] for q, _ in qs]
        cid = f"doc-{n_target}"
        rows: dict[str, list[dict]] = {"vllm dense": [], f"vllm prompt {args.fraction:.0%}": [],
                                       "agentctx dense": [], f"agentctx {args.fraction:.0%}": []}
        keys = list(rows)

        def req(i, pages):
            return GenerateRequest(cid, prompts[i], None if pages is None else tuple(pages),
                                   max_new_tokens=args.max_new, stop=("\n",))

        # vLLM: the first question with nothing cached (prefix cache reset) is the cold TTFT;
        # then VLLMEngine.prefill makes sure the document is in the prefix cache (see its
        # _warm: a second computation is sometimes needed), and every question runs warm.
        vllm.llm.reset_prefix_cache()
        vllm.prefill(cid, doc, warm=False)
        cold_vllm = vllm.generate(req(0, None))
        t_pre = time.perf_counter()
        vllm.prefill(cid, doc, warm=True)
        vllm_prefill_s = time.perf_counter() - t_pre
        ref = []
        for i in range(len(qs)):
            r = vllm.generate(req(i, None))
            ref.append(r.token_ids)
            rows[keys[0]].append(_row(r, qs[i][1], None))
        for i in range(len(qs)):
            rows[keys[1]].append(_row(vllm.generate(req(i, plans[i])), qs[i][1], ref[i]))
        # agentctx: prefill once, then every question over the shared KV.
        pre = local.prefill(cid, doc, progress=False)
        for i in range(len(qs)):
            rows[keys[2]].append(_row(local.generate(req(i, None)), qs[i][1], ref[i]))
        for i in range(len(qs)):
            rows[keys[3]].append(_row(local.generate(req(i, plans[i])), qs[i][1], ref[i]))
        local.drop(cid)
        vllm.drop(cid)

        peers = {}
        for k, rs in rows.items():
            # cold: vLLM's first question over an empty cache; agentctx: prefill + first question
            cold = pre.prefill_s + rs[0]["ttft_s"] if k.startswith("agentctx") else cold_vllm.ttft_s
            warm = [r["ttft_s"] for r in rs]
            peers[k] = {
                "cold_ttft_s": cold,
                "warm_ttft_s": statistics.median(warm),
                "decode_ms_per_token": statistics.median(r["decode_ms_per_token"] for r in rs),
                "needle_accuracy": sum(r["needle_hit"] for r in rs) / len(rs),
                "agreement_with_vllm_dense": (None if rs[0]["agree"] is None
                                              else sum(bool(r["agree"]) for r in rs) / len(rs)),
                "utilization": statistics.mean(r["attended_tokens"] / r["context_tokens"] for r in rs),
                "rows": rs,
            }
        results.append({"tokens": n, "pages": -(-n // args.page), "agentctx_prefill_s": pre.prefill_s,
                        "vllm_prefill_s": vllm_prefill_s, "peers": peers})
        print(f"\n## {n} tokens ({-(-n // args.page)} pages); agentctx prefill {pre.prefill_s:.1f} s; "
              f"vLLM prefill into its prefix cache {vllm_prefill_s:.1f} s", flush=True)
        _print_table(n, peers, keys)

    out = {"machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs", "device": "cpu",
           "model": "Gemma 3 270M (embedded, fp32)", "vllm_load_s": vllm_load_s, "agentctx_load_s": local_load_s,
           "args": vars(args), "results": results}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
    print("\n# summary: warm TTFT and decode ratios, vLLM dense reuse / agentctx (>1 = agentctx faster)")
    print("| tokens | warm TTFT vllm dense | agentctx dense | agentctx sel | vllm/agentctx-dense | vllm/agentctx-sel "
          "| decode ms/tok vllm | agentctx sel | vllm/agentctx-sel |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        p = r["peers"]
        vd, ad, asel = p[next(iter(p))], p["agentctx dense"], p[[k for k in p if k.startswith("agentctx ")][-1]]
        print(f"| {r['tokens']} | {vd['warm_ttft_s'] * 1e3:.0f} ms | {ad['warm_ttft_s'] * 1e3:.0f} ms | "
              f"{asel['warm_ttft_s'] * 1e3:.0f} ms | {vd['warm_ttft_s'] / ad['warm_ttft_s']:.2f}x | "
              f"{vd['warm_ttft_s'] / asel['warm_ttft_s']:.2f}x | {vd['decode_ms_per_token']:.1f} | "
              f"{asel['decode_ms_per_token']:.1f} | {vd['decode_ms_per_token'] / asel['decode_ms_per_token']:.2f}x |")
    vllm.close()
    return 0


def _print_table(n: int, peers: dict, keys: list[str]) -> None:
    print("| peer | cold TTFT | warm TTFT | decode ms/tok | context read | needle acc | agrees w/ vllm dense |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k in keys:
        p = peers[k]
        agree = "-" if p["agreement_with_vllm_dense"] is None else f"{p['agreement_with_vllm_dense']:.2f}"
        print(f"| {k} | {p['cold_ttft_s']:.2f} s | {p['warm_ttft_s'] * 1e3:.0f} ms | "
              f"{p['decode_ms_per_token']:.1f} | {100 * p['utilization']:.0f}% | {p['needle_accuracy']:.2f} | "
              f"{agree} |",
              flush=True)


if __name__ == "__main__":  # vLLM spawns processes: the guard is required
    raise SystemExit(main())
