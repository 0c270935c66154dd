"""The session benchmark end to end on CPU with a tiny random model (~1K tokens).

Runs it as its users do, ``python bench/bench_session.py ...`` in a subprocess (tests do not import
``bench``). Checks the JSON report: every peer present, agentctx at 100% selection gives the
same greedy tokens as dense reuse, metrics positive, targets evaluated, markdown written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kv_dtype", ["auto", "int8"])  # int8: the document's pages held quantised
def test_session_bench_tiny_cpu(tmp_path, kv_dtype):
    cmd = [
        sys.executable, str(ROOT / "bench" / "bench_session.py"),
        "--model", "tiny-gemma3:1k", "--device", "cpu",
        "--agents", "2", "--questions", "1", "--decode-tokens", "3",
        "--page-size", "64", "--prefill-chunk", "256", "--recent-tokens", "64",
        "--kernel-reps", "4", "--no-alarm", "--no-probe", "--out", str(tmp_path),
        "--query-mode", "static",  # the CUDA-graph path's static forwards, run eagerly on CPU
        "--kv-dtype", kv_dtype,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=230, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "bench_session.json").read_text())
    assert (tmp_path / "bench_session.md").read_text().count("| tiny-gemma3 |") >= 5

    m = res["models"]["tiny-gemma3"]
    assert m["random"] is True and "oracle+random" in m["selection"]
    assert m["query_mode"] == "static" and m["kv_dtype"] == kv_dtype
    size = m["sizes"][str(1024)]
    assert size["tokens"] == 1024 and size["queries"] == 2
    peers = size["peers"]
    assert set(peers) == {"naive", "dense", "agentctx"}
    assert set(peers["agentctx"]) == {"0.05", "0.12", "0.25"}

    # 100 % selection reproduces dense reuse exactly (same pages, same kernels).
    check = size["agentctx_100pct_check"]
    assert check["exact"] is True and check["identical"] == 1.0 and check["n"] == 2

    all_peers = [peers["naive"], peers["dense"], *peers["agentctx"].values()]
    for p in all_peers:
        assert p["queries_measured"] >= 1
        assert p["ttft_mean_s"] > 0 and p["session_s"] > 0 and p["decode_tok_s"] > 0
        assert 0 < p["utilization"] <= 1.0
        assert p["floors"]["ttft_s"] > 0 and p["floors"]["decode_attn_s"] > 0
        for run in p["runs"]:
            assert len(run["tokens"]) == 3
    assert size["prefill_tok_s"] > 0
    assert m["shape"]["kv_bytes_per_token"] > 0
    for p in [peers["dense"], *peers["agentctx"].values()]:
        assert p["kernel"]["device_s"] > 0
    # selected budgets attend to fewer tokens than dense, and always cover the planted needle
    for p in peers["agentctx"].values():
        assert p["utilization"] < 1.0
        assert p["needle_pages_recall"] == 1.0
    assert res["rates"]["copy_bandwidth_Bps"] > 0 and res["rates"]["matmul_flops"] > 0
    assert len(res["targets"]) >= 3
