"""A long document through the HTTP API as a user uploads it: async upload, status polls, a query.

    python bench/bench_casefile.py --agreements 5 --filler 80000 95000 --write /tmp/case.txt
    python bench/experiments/long_upload.py /tmp/case.txt [--append-chars 8600] [--port 8031] [--redis-port 6391]

Starts its own redis-server (AOF) and ``agentctx serve`` with deploy/agentctx.yaml (its Redis and port
moved, an API key set), uploads the text with ``"async": true``, polls ``GET /v1/contexts/{id}``
every 15 s (each status written to ``status.jsonl`` in --out), then asks one question and prints the
prefill metrics; stops what it started. ``--append-chars`` appends the text's first N characters
again, to bring a case file near the 131,072-token limit (RELIABILITY.md, "long upload").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
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
    serve = subprocess.Popen(cmd, env=env, stdout=open(out / "serve.log", "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    t0 = time.time()
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=5)
                break
            except OSError:
                if time.time() - t0 > 600 or serve.poll() is not None:
                    print("serve did not start; see", out / "serve.log")
                    return 1
                time.sleep(3)
        print(f"serve up in {time.time() - t0:.0f} s", flush=True)
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
        return 0 if st.get("status") == "ready" and "failed" not in states else 1
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        redis.terminate()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
