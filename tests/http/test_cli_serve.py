"""``agentctx serve --config FILE`` as a user runs it: a subprocess with its own Ray, Ctrl-C to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from tests._stack import CONTRACT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_agentctx_serve_starts_answers_and_stops_on_ctrl_c(tmp_path, redis_url, tiny_ckpt):
    port = free_port()
    cfg = {
        "model": {"path": str(tiny_ckpt), "page_size": 16, "prefill_chunk_tokens": 32},
        "store": {"redis_url": redis_url, "namespace": f"cli-{port}"},
        "serve": {"port": port, "api_keys": {"env:AGENTCTX_TEST_KEY": "cli"}},
    }
    path = tmp_path / "agentctx.yaml"
    path.write_text(yaml.safe_dump(cfg))
    key = "cli-test-key-0123456789"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["AGENTCTX_TEST_KEY"] = key
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "agentctx.entrypoints.cli", "serve", "--config", str(path)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "agentctx serve did not come up"
            time.sleep(0.5)
        h = {"Authorization": f"Bearer {key}"}
        r = httpx.post(url + "/v1/contexts", json={"text": CONTRACT}, headers=h, timeout=120)
        assert r.status_code == 201, r.text
        q = httpx.post(url + f"/v1/contexts/{r.json()['id']}/query", headers=h, timeout=120,
                       json={"question": "Notice?", "max_new_tokens": 4})
        assert q.status_code == 200, q.text
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
    out = (tmp_path / "serve.log").read_text()
    assert f"agentctx serving on {url}" in out
