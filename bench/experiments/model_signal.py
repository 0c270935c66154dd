"""Issue 32: does the model's own attention find what the embeddings miss at small budgets?

A *probe pass*: the question is run once through the real model (Gemma 3 270M, CPU) over the whole
prefilled document, and at every global layer the attention mass its tokens put on each page is
recorded (softmax over the document and the question itself, mean over heads and question
tokens; the last token's mass kept apart). At 32K a probe over every page is cheap (a 20-token
extend); at 1M a product would probe a wide candidate set instead.

Then, offline from the saved JSON, rankings are rebuilt and planned with the default policy
(``plan_from_ranking`` with retrieval's evidence companions), beside retrieval alone in the same
data:

* ``retrieval``: the policy's own ranking (the baseline; equals ``plan()``'s pages);
* ``model``: pages by attention mass alone;
* ``rrf:K``: reciprocal-rank fusion of the two rankings (``1/(K + r)`` summed);
* ``rerank:C:w``: retrieval's top C pages reordered by ``rank_retrieval + w * rank_model``, the rest
  after them in retrieval order.

Split as in ``bench.experiments.small_budget``: odd questions tune, even ones check; choose a
setting on the tuning half, then read the check half.

    python -m bench.experiments.model_signal collect --cache-dir /tmp/sb-cache --out /tmp/ms.json
    python -m bench.experiments.model_signal eval /tmp/ms.json [--relative]

Findings (BENCHMARKS §5, "The model's own signal"): raw mass is positional (no signal); mass over a
per-document baseline is a real but weaker signal than retrieval, and no fusion helps every set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.small_budget import docs  # noqa: E402

PAGE = 256


def _probe(runner, doc, ids: list[int], n_doc: int, offset: int) -> dict[str, list[list[float]]]:
    """Attention mass per document page at each global layer for one probe extend.

    Returns {"mean": [layer][page], "last": [layer][page], "peak": [layer][page]}: the mass of all
    question tokens (mean over tokens and heads), of the last token alone, and the largest single
    token's mass in the page (mean over heads and question tokens)."""
    import torch

    from agentctx.serving.runner import attention as attn

    captured: dict[int, torch.Tensor] = {}
    orig = attn._global_extend

    def spy(step, layer, q, k, v, scale, softcap):
        flat_k, _ = step.doc.flat(layer)
        keys = flat_k[: step.doc.num_tokens].float()  # (N, Hkv, D)
        qf, kf = q.float(), k.float()  # (T, Hq, D), (T, Hkv, D)
        rep = qf.shape[1] // keys.shape[1]
        s_doc = torch.einsum("thd,nhd->htn", qf, keys.repeat_interleave(rep, dim=1)) * scale
        s_loc = torch.einsum("thd,shd->hts", qf, kf.repeat_interleave(rep, dim=1)) * scale
        if softcap:
            s_doc, s_loc = (softcap * torch.tanh(x / softcap) for x in (s_doc, s_loc))
        t = qf.shape[0]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        s_loc = s_loc.masked_fill(~causal, float("-inf"))
        lse = torch.logsumexp(torch.cat([s_doc, s_loc], dim=-1), dim=-1, keepdim=True)
        captured[layer] = torch.exp(s_doc - lse).mean(dim=0)  # (T, N): mean over heads
        return orig(step, layer, q, k, v, scale, softcap)

    attn._global_extend = spy
    try:
        tail = runner.new_tail(doc)
        runner.extend(doc, tail, ids)
    finally:
        attn._global_extend = orig
    out: dict[str, list[list[float]]] = {"mean": [], "last": [], "peak": []}
    n_pages = -(-n_doc // PAGE)
    page_of = torch.arange(n_doc) // PAGE
    for layer in sorted(captured):
        m = captured[layer][:, offset: offset + n_doc]  # document tokens only (drop BOS)
        for key, per_tok in (("mean", m.mean(0)), ("last", m[-1])):
            out[key].append(torch.zeros(n_pages).index_add_(0, page_of, per_tok).tolist())
        peak = torch.full((n_pages,), 0.0).scatter_reduce_(0, page_of, m.mean(0), reduce="amax")
        out["peak"].append(peak.tolist())
    return out


def collect(args) -> int:
    import torch

    from agentctx.retrieval.document import DocumentIndex
    from agentctx.retrieval.embedding import Embedder
    from agentctx.retrieval.policy import SelectionPolicy, _companions, _ranking, plan
    from agentctx.serving.compute_dtype import default_dtype
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.runner.model_runner import ModelRunner

    torch.set_grad_enabled(False)
    dtype = default_dtype("cpu") if args.dtype == "auto" else getattr(torch, args.dtype)
    loaded = load_model(None, dtype=dtype, device="cpu")
    tok = loaded.tokenizer
    runner = ModelRunner(loaded, page_size=PAGE, prefill_chunk_tokens=1024, query_mode="eager")
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    cache = Path(args.cache_dir)
    recs = []
    for setname, name, text, offs, qs, key in docs(tok, args.size, args.sets.split(",")):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(offs)
        idx = DocumentIndex(text, offs, embedder=Embedder(cache_dir=cache / key))
        t0 = time.perf_counter()
        doc = runner.prefill(bos + ids, progress=False)
        print(f"{setname}/{name}: {len(ids)} tokens prefilled in {time.perf_counter() - t0:.0f} s "
              f"({dtype}), {len(qs)} questions", flush=True)
        for q in qs:
            pol = SelectionPolicy(budget_fraction=0.12, top_k_pages=None, sink_pages=1, recent_tokens=256,
                                  page_size_tokens=PAGE, method="hybrid")
            res = idx.retrieve(q.question, idx.num_pages)
            probe_ids = tok(args.template.format(q=q.question), add_special_tokens=False)["input_ids"]
            masses = _probe(runner, doc, probe_ids, len(ids), len(bos))
            base = {str(b): plan(q.question, idx, idx.num_pages, idx.last_page_len,
                                 SelectionPolicy(**{**pol.__dict__, "budget_fraction": b})).pages
                    for b in (0.05, 0.12)}
            recs.append({
                "set": setname, "doc": name, "id": q.id, "half": q.half, "question": q.question,
                "wants": q.wants, "num_pages": idx.num_pages, "last_page_len": idx.last_page_len,
                "ranking": _ranking(idx, res, pol),
                "companions": {str(k): v for k, v in (_companions(idx, res, pol) or {}).items()},
                "plan_pages": {b: list(map(int, p)) for b, p in base.items()},
                "mass": masses,
            })
        del doc
    Path(args.out).write_text(json.dumps(recs))
    print(f"wrote {len(recs)} questions to {args.out}")
    return 0


def baselines(recs, signal: str) -> dict[str, list[list[float]]]:
    """Per document, each page's mass averaged over all of its questions (per layer).

    Attention mass is mostly positional (the last pages and the first ones draw it whatever the
    question), so ``--relative`` ranks pages by log(mass / this baseline). Averaging over the dev
    set's own questions is an optimistic stand-in for a product's neutral probe."""
    out = {}
    for doc in {r["doc"] for r in recs}:
        rs = [r for r in recs if r["doc"] == doc]
        m = [r["mass"][signal] for r in rs]
        out[doc] = [[sum(x[li][p] for x in m) / len(m) for p in range(len(m[0][li]))] for li in range(len(m[0]))]
    return out


def _model_rank(rec, signal: str, layers: str, base: list[list[float]] | None) -> list[int]:
    m = rec["mass"][signal]
    use = range(len(m)) if layers == "all" else [int(x) for x in layers.split("+")]
    if base is None:
        score = [sum(m[li][p] for li in use) for p in range(rec["num_pages"])]
    else:
        score = [sum(math.log(m[li][p] + 1e-12) - math.log(base[li][p] + 1e-12) for li in use)
                 for p in range(rec["num_pages"])]
    return sorted(range(rec["num_pages"]), key=lambda p: -score[p])


def rankings(rec, variant: str, signal: str, layers: str, base: list[list[float]] | None = None) -> list[int]:
    ret = rec["ranking"]
    if variant == "retrieval":
        return ret
    mod = _model_rank(rec, signal, layers, base)
    if variant == "model":
        return mod
    rm = {p: i for i, p in enumerate(mod)}
    if variant.startswith("rrf:"):
        k = float(variant.split(":")[1])
        rr = {p: i for i, p in enumerate(ret)}
        pages = set(ret) | set(mod)
        return sorted(pages, key=lambda p: -(1 / (k + rr.get(p, len(pages))) + 1 / (k + rm[p])))
    if variant.startswith("rerank:"):
        _, c, w = variant.split(":")
        top = ret[: int(c)]
        head = sorted(top, key=lambda p: top.index(p) + float(w) * rm[p])
        return head + ret[int(c):]
    raise ValueError(variant)


def evaluate(args) -> int:
    from agentctx.retrieval.policy import SelectionPolicy, plan_from_ranking

    recs = [r for path in args.paths for r in json.loads(Path(path).read_text())]
    variants = args.variants.split(",")
    budgets = ["0.05", "0.12"]
    rows = []
    mismatched = 0
    signals = args.signals.split(",")
    base_of = {sig: baselines(recs, sig) if args.relative else {} for sig in signals}  # once per signal
    for variant in variants:
        for signal in signals:
            if variant == "retrieval" and signal != signals[0]:
                continue
            base = base_of[signal]
            hits: dict[tuple, list[bool]] = {}
            for rec in recs:
                ranked = rankings(rec, variant, signal, args.layers, base.get(rec["doc"]))
                comp = {int(k): v for k, v in rec["companions"].items()}
                for b in budgets:
                    pol = SelectionPolicy(budget_fraction=float(b), top_k_pages=None, sink_pages=1, recent_tokens=256,
                                          page_size_tokens=PAGE, method="hybrid")
                    pages = plan_from_ranking(ranked, rec["num_pages"], rec["last_page_len"], pol, None, comp).pages
                    if variant == "retrieval" and sorted(pages) != sorted(rec["plan_pages"][b]):
                        mismatched += 1  # plan() ranked the whole document again (a short plan)
                    hit = any(all(p in pages for p in w) for w in rec["wants"])
                    for h in (rec["half"], "all"):
                        hits.setdefault((rec["set"], h, b), []).append(hit)
            name = variant if variant == "retrieval" else f"{variant} [{signal}]"
            rows.append((name, hits))
    print(f"retrieval baseline: {mismatched} plans differ from plan()'s own")
    sets = list(dict.fromkeys(r["set"] for r in recs))
    cols = [(s, h) for s in sets for h in ("tuning", "check")]
    print("| variant | " + " | ".join(f"{s} {h} @5% / @12%" for s, h in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, hits in rows:
        cells = []
        for s, h in cols:
            a, b = hits.get((s, h, "0.05"), []), hits.get((s, h, "0.12"), [])
            cells.append(f"{sum(a)}/{len(a)} / {sum(b)}" if a else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--size", default="32k")
    c.add_argument("--sets", default="planted,native,casefile")
    c.add_argument("--cache-dir", required=True)
    c.add_argument("--dtype", default="auto", help="auto (the CPU's default) | float32 | bfloat16")
    c.add_argument("--template", default="Question: {q}\nAnswer:")
    c.add_argument("--out", required=True)
    e = sub.add_parser("eval")
    e.add_argument("paths", nargs="+", help="collect's JSON files")
    e.add_argument("--relative", action="store_true", help="rank by mass over the per-document baseline")
    e.add_argument("--variants", default="retrieval,model,rrf:10,rrf:60,rerank:12:0.5,rerank:24:0.5,rerank:24:1")
    e.add_argument("--signals", default="mean,last,peak")
    e.add_argument("--layers", default="all", help="all, or global-layer positions joined by +, e.g. 0+2")
    args = ap.parse_args(argv)
    return collect(args) if args.cmd == "collect" else evaluate(args)


if __name__ == "__main__":
    raise SystemExit(main())
