"""The replica's engine on CPU against the engine it replaced, in the same run (real Gemma 3 270M).

    python bench/bench_scheduler_cpu.py [--before-ref f7dc6b9] [--agents 8] [--tokens 4096] [--out FILE]

Two cases, each run by both peers on this machine in fresh processes, the peers alternating
``--repeats`` times (default 2; a shared machine's load then hits both alike) and the best run
of each reported (the agents case by tok/s, the head-of-line case by its ratio):

* **agents**: ``--agents`` concurrent generations over one ~4K-token contract, each its own
  question over its own ~12% of the pages, greedy, ``--new-tokens`` each (BENCHMARKS §4e's
  setting). Aggregate tok/s (tokens / wall), TTFT mean and max; greedy tokens must be identical.
* **head-of-line**: a short query alone, then the same query sent while a 16,384-character
  question (over the whole document) is in flight; the short query's latency in both.

The "before" peer is the engine of ``--before-ref`` (default f7dc6b9, the last commit before the
engine loop: a thread per request handing the scheduler one token at a time; 9fdd1dd is the one
before that scheduler, with a forward lock for prompts and ``DecodeBatcher``), exported with
``git archive`` into a temporary dir and imported from there; "after" is this checkout. Both
use the same venv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ("Who must give notice of termination?", "What is the liability cap?",
             "Which law governs this agreement?", "When are invoices due?", "What happens on a change of control?",
             "Who owns the intellectual property?", "How long does confidentiality last?", "Can either party assign?")
SHORT = "\nQuestion: Which law governs this agreement?\nAnswer:"
_PACKAGES = ("kernels", "serving", "retrieval", "kv_store", "pipelines", "entrypoints", "common")


def _concurrent(engine, reqs, delays=None) -> list:
    results = [None] * len(reqs)

    def one(i):
        if delays:
            time.sleep(delays[i])
        t0 = time.perf_counter()
        r = engine.generate(reqs[i])
        results[i] = (r, time.perf_counter() - t0)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_peer(args) -> dict:
    """Both cases on the engine importable as agentctx (this checkout or the --before-ref tree)."""
    import inspect

    import agentctx.serving.engine as engine_mod
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.types import GenerateRequest
    from tests.fixtures.contracts import generate_contract

    loaded = load_model(args.model)
    kw = {"decode_batch": max(args.agents, 2)}
    if "step_tokens" in inspect.signature(LocalEngine.__init__).parameters:
        kw.update(step_tokens=args.step_tokens, step_tokens_decoding=args.step_tokens_decoding)
    engine = LocalEngine(loaded, **kw)
    # Ablations of the "after" peer (attributes that the old engine does not have are left alone).
    if args.no_group_decode and hasattr(engine.runner, "group_decode_rows"):
        engine.runner.group_decode_rows = False
    if args.no_greedy_head and hasattr(engine.runner, "cpu_greedy_head"):
        engine.runner.cpu_greedy_head = False
    text = generate_contract(args.tokens, seed=0).text
    doc = engine.tokenize_document(text)
    engine.prefill("doc", doc, progress=False)
    n_pages = -(-len(doc.token_ids) // engine.page_size)
    rng = random.Random(0)
    k = max(1, round(args.budget * n_pages))
    reqs = [GenerateRequest("doc", f"\nQuestion: {QUESTIONS[i % len(QUESTIONS)]}\nAnswer:",
                            pages=tuple(sorted(rng.sample(range(n_pages), k))), max_new_tokens=args.new_tokens)
            for i in range(args.agents)]
    out = {"engine": engine_mod.__file__, "model": loaded.model_id, "doc_tokens": len(doc.token_ids),
           "pages": n_pages, "pages_each": k, "torch_threads": __import__("torch").get_num_threads()}
    rounds = []
    for _ in range(2):  # the second round is reported (the first warms allocators and caches)
        t0 = time.perf_counter()
        res = _concurrent(engine, reqs)
        wall = time.perf_counter() - t0
        toks = sum(len(r.token_ids) for r, _ in res)
        rounds.append({"wall_s": wall, "tokens": toks, "tok_per_s": toks / wall,
                       "ttft_mean_s": sum(r.ttft_s for r, _ in res) / len(res),
                       "ttft_max_s": max(r.ttft_s for r, _ in res), "token_ids": [r.token_ids for r, _ in res]})
    out["agents"] = rounds[-1]
    # Head-of-line: the short query alone, then 0.5 s after a 16,384-character question started.
    short = GenerateRequest("doc", SHORT, pages=reqs[0].pages, max_new_tokens=args.short_tokens)
    words = text.replace("\n", " ")
    long_q = "\nQuestion: " + (words * (1 + args.long_chars // len(words)))[: args.long_chars] + "\nAnswer:"
    long_req = GenerateRequest("doc", long_q, max_new_tokens=4)
    engine.generate(short)
    alone = [_concurrent(engine, [short])[0][1] for _ in range(2)]
    (long_r, long_s), (short_r, short_s) = _concurrent(engine, [long_req, short], delays=[0.0, 0.5])
    out["head_of_line"] = {"short_alone_s": min(alone), "short_with_long_s": short_s,
                           "ratio": short_s / min(alone), "long_s": long_s, "long_prompt_tokens": long_r.prompt_tokens,
                           "short_prompt_tokens": short_r.prompt_tokens, "short_tokens": len(short_r.token_ids)}
    return out


def _tree_of(ref: str, tmp: Path) -> Path:
    """Import root for the engine at git ref: `git archive` plus the package-dir mapping as links."""
    src = tmp / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = tmp / "pkg" / "agentctx"
    pkg.mkdir(parents=True)
    for f in (src / "agentctx").iterdir():
        (pkg / f.name).symlink_to(f)
    for name in _PACKAGES:
        (pkg / name).symlink_to(src / name)
    return tmp / "pkg"


def _child(args, pythonpath: str | None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--peer-out", f.name, *sys.argv[1:]]
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath + os.pathsep + str(ROOT)
        subprocess.run(cmd, check=True, env=env, cwd="/tmp" if pythonpath else ROOT)
        out = json.loads(Path(f.name).read_text())
    # Each peer must have run its own engine.
    if (pythonpath is not None) != (not out["engine"].startswith(str(ROOT))):
        raise RuntimeError(f"peer ran the wrong engine: {out['engine']} (PYTHONPATH {pythonpath})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="local checkpoint dir; default: embedded Gemma 3 270M")
    # f7dc6b9: the last commit with the thread-per-request scheduler (9fdd1dd: the DecodeBatcher engine).
    ap.add_argument("--before-ref", default="f7dc6b9")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--budget", type=float, default=0.12)
    ap.add_argument("--short-tokens", type=int, default=16)
    ap.add_argument("--long-chars", type=int, default=16384)
    ap.add_argument("--step-tokens", type=int, default=None, help="default: the engine's, by device")
    ap.add_argument("--step-tokens-decoding", type=int, default=None)
    ap.add_argument("--only", choices=("before", "after"), default=None)
    ap.add_argument("--no-group-decode", action="store_true", help="after peer: decode rows attend row by row")
    ap.add_argument("--no-greedy-head", action="store_true", help="after peer: greedy rows read the full head")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--peer-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_out:
        # tests.fixtures.contracts (the same generator for both peers) from this checkout; last on
        # the path, or this checkout's agentctx/ would shadow the "before" tree (it did until
        # 2026-12-05, so both peers ran the current engine).
        sys.path.append(str(ROOT))
        Path(args.peer_out).write_text(json.dumps(run_peer(args)))
        return 0
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        before_tree = str(_tree_of(args.before_ref, Path(tmp))) if args.only != "after" else None
        for _ in range(args.repeats):  # peers alternate, so a shared machine's load hits both alike
            if args.only != "after":
                runs["before"].append(_child(args, before_tree))
            if args.only != "before":
                runs["after"].append(_child(args, None))
    runs = {k: v for k, v in runs.items() if v}
    print(f"{platform.node()}, {os.cpu_count()} CPUs; {args.agents} agents x {args.new_tokens} tokens, "
          f"{args.budget:.0%} of the pages each; {args.repeats} alternating runs per peer, best reported")
    for name, rs in runs.items():
        for i, p in enumerate(rs):
            a, h = p["agents"], p["head_of_line"]
            print(f"    {name} run {i + 1}: {a['tok_per_s']:6.2f} tok/s, TTFT mean {a['ttft_mean_s']:5.2f} s; "
                  f"short query {h['short_alone_s']:5.2f} s alone, {h['short_with_long_s']:6.2f} s with the long one "
                  f"({h['ratio']:.2f}x)")
    # Best of the runs: the agents case by throughput, the head-of-line case by its ratio.
    peers = {name: {**max(rs, key=lambda p: p["agents"]["tok_per_s"]),
                    "head_of_line": min((p["head_of_line"] for p in rs), key=lambda h: h["ratio"])}
             for name, rs in runs.items()}
    for name, p in peers.items():
        a, h = p["agents"], p["head_of_line"]
        print(f"  {name:>6} ({p['model']}, {p['doc_tokens']}-token doc, {p['pages_each']}/{p['pages']} pages): "
              f"{a['tok_per_s']:6.2f} tok/s  wall {a['wall_s']:6.2f} s  TTFT mean {a['ttft_mean_s']:6.2f} s  "
              f"max {a['ttft_max_s']:6.2f} s | short query alone {h['short_alone_s']:5.2f} s, with a "
              f"{h['long_prompt_tokens']}-token question in flight {h['short_with_long_s']:6.2f} s "
              f"({h['ratio']:.2f}x)")
    same = None
    if len(peers) == 2:
        b, a = peers["before"]["agents"], peers["after"]["agents"]
        same = b["token_ids"] == a["token_ids"]
        print(f"  after / before: {a['tok_per_s'] / b['tok_per_s']:.2f}x tok/s, TTFT mean "
              f"{b['ttft_mean_s'] / a['ttft_mean_s']:.2f}x lower; greedy tokens identical: {same}")
    if args.out:
        for rs in runs.values():
            for p in rs:
                p["agents"].pop("token_ids", None)
        Path(args.out).write_text(json.dumps({"args": vars(args), "tokens_identical": same, "best": peers,
                                              "runs": runs}, indent=2))
    return 0 if same is not False else 1


if __name__ == "__main__":
    raise SystemExit(main())
