"""Resumable prefill on the real Gemma 3 270M (CPU): checkpoint overhead, and a real kill.

1. overhead: one ~4K-token document prefilled by a store-backed replica with checkpoints off,
   at every chunk (``prefill_checkpoint_s: 0``, the most a checkpoint can cost) and at the default
   cadence (30 s), alternating, ``--repeats`` times each; tokens/s (best run) and the time spent
   saving checkpoints (``replica.metrics["checkpoint_s_sum"]``).
2. kill: a replica process prefills the document with a checkpoint at every chunk; it is
   SIGKILLed once its progress passes ``--kill-at``; a second process prefills the same document
   and reports how many tokens it took from the checkpoint and how many it computed.

Both use a temporary ``redis-server`` (or ``--redis-url``) and a local Ray (``RAY_TMPDIR`` is
honoured); the replica processes join that Ray cluster, so the detached store actor (and the
pages it owns) outlives the killed one, as in a deployment where only a replica dies.

Run from the repo root:  python bench/bench_prefill_resume.py [--tokens 4096] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PAGE, CHUNK = 256, 512


def document(tokenizer, tokens: int) -> str:
    """Contract-like clauses, cut to about ``tokens`` tokens of the model's tokenizer."""
    text = " ".join(f"Clause {i}: the supplier shall deliver item {i * 7 % 13} to depot {i % 5} on day {i}, "
                    f"and the buyer pays within {10 + i % 30} days." for i in range(tokens // 10))
    ids = tokenizer(text)["input_ids"]
    return tokenizer.decode(ids[: tokens - 8], skip_special_tokens=True)


def make_replica(store, checkpoint_s: float | None, engine=None):
    from agentctx.serving.config import EngineConfig
    from agentctx.serving.serve.replica import ModelReplica

    cfg = EngineConfig(page_size=PAGE, prefill_chunk_tokens=CHUNK, device="cpu", prefill_checkpoint_s=checkpoint_s)
    return ModelReplica(cfg, store=store, engine=engine)


def worker(args) -> None:
    """One replica process: prefill the document, a JSON line per chunk, the result last."""
    from agentctx.kv_store import KVStore

    store = KVStore.connect(args.redis_url, namespace=args.namespace)
    rep = make_replica(store, 0.0)
    doc = rep.tokenize_document(Path(args.text_file).read_text())
    t0 = time.perf_counter()

    def on_chunk(done: int, total: int) -> None:
        print(json.dumps({"done": done, "total": total, "t": round(time.perf_counter() - t0, 2)}), flush=True)

    res = rep.prefill_context(args.context_id, "bench", doc, progress=False, on_chunk=on_chunk)
    print(json.dumps({"result": {"num_tokens": res.num_tokens, "resumed_tokens": res.resumed_tokens,
                                 "computed_tokens": rep.engine.stats["prefill_tokens"],
                                 "prefill_s": round(res.prefill_s, 2),
                                 "checkpoints": rep.metrics["checkpoint_saves"],
                                 "checkpoint_s": round(rep.metrics["checkpoint_s_sum"], 3)}}), flush=True)


def run_worker(args, ray_address: str, text_file: str, context_id: str, kill_at: float | None) -> dict:
    """Start a replica process; SIGKILL it once its progress passes ``kill_at`` (a fraction)."""
    cmd = [sys.executable, __file__, "--worker", "--redis-url", args.redis_url, "--namespace", args.namespace,
           "--text-file", text_file, "--context-id", context_id]
    env = dict(os.environ, RAY_ADDRESS=ray_address, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    last: dict = {}
    t0 = time.monotonic()
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        item = json.loads(line)
        if "result" in item:
            proc.wait(timeout=60)
            return {**item["result"], "killed": False, "wall_s": round(time.monotonic() - t0, 1)}
        last = item
        if kill_at is not None and item["done"] >= kill_at * item["total"]:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            return {"killed": True, "done_at_kill": item["done"], "total": item["total"],
                    "wall_s": round(time.monotonic() - t0, 1)}
    proc.wait(timeout=60)
    raise RuntimeError(f"worker exited with {proc.returncode} after {last}")


def overhead(args, store, text: str) -> list[dict]:
    from agentctx.serving.engine import LocalEngine

    engine = LocalEngine(None, page_size=PAGE, prefill_chunk_tokens=CHUNK, device="cpu")
    rows: dict[str, list[dict]] = {"off": [], "every chunk (0 s)": [], "default (30 s)": []}
    cadence = {"off": None, "every chunk (0 s)": 0.0, "default (30 s)": 30.0}
    for rep_i in range(args.repeats):
        for name, every in cadence.items():
            rep = make_replica(store, every, engine)
            doc = rep.tokenize_document(text)
            cid = f"ov-{uuid.uuid4().hex[:8]}"
            t0 = time.perf_counter()
            rep.prefill_context(cid, "bench", doc, progress=False)
            wall = time.perf_counter() - t0
            store.delete_context(cid, "bench")
            engine.drop(cid)
            rows[name].append({"tokens": len(doc.token_ids), "wall_s": wall, "saves": rep.metrics["checkpoint_saves"],
                               "save_s": rep.metrics["checkpoint_s_sum"]})
            print(f"run {rep_i} {name}: {len(doc.token_ids) / wall:.1f} tok/s, {rep.metrics['checkpoint_saves']} "
                  f"checkpoints, {rep.metrics['checkpoint_s_sum']:.3f} s saving", flush=True)
    engine.close()
    out = []
    for name, runs in rows.items():
        best = min(runs, key=lambda r: r["wall_s"])
        out.append({"cadence": name, "tokens": best["tokens"], "tok_s": best["tokens"] / best["wall_s"],
                    "wall_s": best["wall_s"], "saves": best["saves"], "save_s": best["save_s"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kill-at", type=float, default=0.6, help="progress fraction at which the replica is killed")
    ap.add_argument("--redis-url", default=None, help="use this Redis (default: start a temporary redis-server)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--namespace", default=f"bench-resume-{uuid.uuid4().hex[:6]}")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--text-file", help=argparse.SUPPRESS)
    ap.add_argument("--context-id", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    import ray

    from agentctx.kv_store import KVStore
    from agentctx.serving.model_loader import load_model
    from tests.conftest import RedisServer

    server = None
    if args.redis_url is None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        server = RedisServer(binary, Path(tempfile.mkdtemp(prefix="bench-redis-")), fsync="everysec").start()
        args.redis_url = server.url
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=2 << 30, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        store = KVStore.connect(args.redis_url, namespace=args.namespace)
        text = document(load_model(None, device="cpu").tokenizer, args.tokens)
        text_file = Path(tempfile.mkdtemp(prefix="bench-resume-")) / "doc.txt"
        text_file.write_text(text)
        if not args.skip_overhead:
            for r in overhead(args, store, text):
                print(f"| {r['cadence']} | {r['tokens']} | {r['tok_s']:.1f} | {r['wall_s']:.1f} | {r['saves']} | "
                      f"{r['save_s']:.3f} |")
        address = ray.get_runtime_context().gcs_address
        first = run_worker(args, address, str(text_file), "killed-doc", args.kill_at)
        print("first replica:", first, flush=True)
        second = run_worker(args, address, str(text_file), "killed-doc", None)
        print("second replica:", second, flush=True)
        wasted = first.get("done_at_kill", 0) - second["resumed_tokens"]
        print(f"kill at {first.get('done_at_kill')} of {second['num_tokens']} tokens: the second replica took "
              f"{second['resumed_tokens']} from the checkpoint and computed {second['computed_tokens']} "
              f"(recomputed {wasted} of the killed one's tokens)", flush=True)
        store.shutdown(kill_actor=True)
    finally:
        ray.shutdown()
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()
