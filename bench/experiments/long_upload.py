"""A long document through the HTTP API as a user uploads it: async upload, status polls, a query.

    python bench/bench_casefile.py --agreements 5 --filler 80000 95000 --write /tmp/case.txt
    python bench/experiments/long_upload.py /tmp/case.txt [--append-chars 8600] [--port 8031] [--redis-port 6391]

Starts its own redis-server (AOF) and ``agentctx serve`` with deploy/agentctx.yaml (its Redis and port
moved, an API key set), uploads the text with ``"async": true``, polls ``GET /v1/contexts/{id}``
every 15 s (each status written to ``status.jsonl`` in --out), then asks one question and prints the
prefill metrics; stops what it started. ``--append-chars`` appends the text's first N characters
again, to bring a case file near the 131,072-token limit (RELIABILITY.md, "long upload").

``--restart``: then a small context is uploaded and queried (its idle latency), the service is
stopped and started again on the same Redis (the object store, and so every page, is gone), the
large context is asked (it must answer at once: 503 + Retry-After while it is rebuilt) and the
small one is queried while the large one is rebuilt (RELIABILITY.md, "restart with a large context").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "long-upload-bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--append-chars", type=int, default=0)
    ap.add_argument("--port", type=int, default=8031)
    ap.add_argument("--redis-port", type=int, default=6391)
    ap.add_argument("--out", default="/tmp/agentctx-long-upload")
    ap.add_argument("--restart", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{args.port}"
    cfg = (ROOT / "deploy/agentctx.yaml").read_text()
    cfg = re.sub(r"redis://127\.0\.0\.1:\d+/0", f"redis://127.0.0.1:{args.redis_port}/0", cfg)
    cfg = re.sub(r"(?m)^  port: \d+", f"  port: {args.port}", cfg)
    (out / "cfg.yaml").write_text(cfg)

    def call(path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url + path, data=data, headers={"content-type": "application/json", **AUTH})
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.startswith(b"{") else raw.decode())

    redis = subprocess.Popen(["redis-server", "--port", str(args.redis_port), "--dir", str(out), "--appendonly", "yes",
                              "--save", ""], stdout=open(out / "redis.log", "w"), stderr=subprocess.STDOUT)
    env = dict(os.environ, RAY_TMPDIR=str(out / "ray"), AGENTCTX_API_KEY=KEY)
    cmd = [sys.executable, "-m", "agentctx.entrypoints.cli", "serve", "--config", str(out / "cfg.yaml")]

    def start():
        proc = subprocess.Popen(cmd, env=env, stdout=open(out / "serve.log", "a"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        t0 = time.time()
        # Ready as a load balancer sees it: /readyz answers 200 once the store and a model replica
        # answer (the ingress connects them in the background as it starts; /healthz is liveness only).
        while True:
            try:
                urllib.request.urlopen(url + "/readyz", timeout=5)
                print(f"serve ready in {time.time() - t0:.0f} s", flush=True)
                return proc
            except OSError:
                if time.time() - t0 > 600 or proc.poll() is not None:
                    raise SystemExit(f"serve did not start; see {out / 'serve.log'}") from None
                time.sleep(1)

    def stop(proc):
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)

    def ask(cid, question="What does this agreement cover?"):
        t = time.time()
        try:
            code, _ = call(f"/v1/contexts/{cid}/query", {"question": question, "max_new_tokens": 16})
            return code, time.time() - t, None
        except urllib.error.HTTPError as err:
            return err.code, time.time() - t, err.headers.get("Retry-After")

    serve = start()
    try:
        text = Path(args.file).read_text()
        if args.append_chars:
            text += "\n\n" + text[: args.append_chars]
        t1 = time.time()
        code, body = call("/v1/contexts", {"text": text, "async": True})
        print("upload", code, json.dumps(body)[:300], flush=True)
        cid, states = body["id"], []
        with open(out / "status.jsonl", "w") as log:
            while True:
                time.sleep(15)
                code, st = call(f"/v1/contexts/{cid}")
                st["_t"], st["_code"] = round(time.time() - t1, 1), code
                log.write(json.dumps(st) + "\n")
                log.flush()
                states.append(st.get("status"))
                if st.get("status") in ("ready", "failed"):
                    break
        print("final", json.dumps(st)[:600], flush=True)
        print("states seen", sorted(set(states)), flush=True)
        tq = time.time()
        code, ans = call(f"/v1/contexts/{cid}/query", {"question": "Which state's law governs the Gurobi evaluation "
                                                                   "licence?", "max_new_tokens": 24})
        print("query", code, f"{time.time() - tq:.1f} s", flush=True)
        _, metrics = call("/metrics")
        print("\n".join(ln for ln in metrics.splitlines() if "prefill" in ln and not ln.startswith("#")), flush=True)
        ok = st.get("status") == "ready" and "failed" not in states
        if args.restart:
            small = (ROOT / "agentctx/samples/sample_contract.txt").read_text()[:4000]
            _, body = call("/v1/contexts", {"text": small})
            sid = body["id"]
            ask(sid)  # warm
            idle = [ask(sid)[1] for _ in range(6)]
            print(f"small context idle: p50 {statistics.median(idle):.2f} s ({[round(x, 2) for x in idle]})",
                  flush=True)
            stop(serve)
            serve = start()
            code, took, retry = ask(cid)
            print(f"large context after the restart: {code} in {took:.2f} s, Retry-After {retry}", flush=True)
            during, t_r = [], time.time()
            # The small context's own restore first (503 + Retry-After while it runs, as a client
            # following Retry-After sees it), then its latency while the large one is rebuilt.
            while True:
                c, took, retry = ask(sid)
                print(f"  small context, its own restore: {c} in {took:.2f} s", flush=True)
                if c == 200:
                    break
                time.sleep(float(retry or 1))
            print(f"small context answers 200 again {time.time() - t_r:.1f} s after the restart", flush=True)
            while len(during) < 6:
                c, took, _ = ask(sid)
                if c != 200:
                    raise SystemExit(f"the small context answered {c} while the large one was rebuilt")
                during.append(took)
                print(f"  small context while the large is rebuilt: {c} in {took:.2f} s", flush=True)
            print(f"small context during the rebuild: p50 {statistics.median(during):.2f} s = "
                  f"{statistics.median(during) / statistics.median(idle):.2f}x idle", flush=True)
            while True:
                code, took, retry = ask(cid)
                if code == 200:
                    break
                _, st = call(f"/v1/contexts/{cid}")
                print(f"  large: {code} in {took:.2f} s, Retry-After {retry}, {json.dumps(st.get('progress'))}",
                      flush=True)
                time.sleep(15)
            print(f"large context answers 200 again {time.time() - t_r:.0f} s after the restart", flush=True)
            _, metrics = call("/metrics")
            lines = [ln for ln in metrics.splitlines() if "restore" in ln and not ln.startswith("#")]
            print("\n".join(lines), flush=True)
        return 0 if ok else 1
    finally:
        stop(serve)
        redis.terminate()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
