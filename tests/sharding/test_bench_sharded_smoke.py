"""bench/bench_sharded.py end to end on CPU (gloo, tiny shapes): the code path the GPU run takes.

Checks the JSON: a size that does not fit one worker is skipped with a reason,
a worker count the machine lacks is "blocked", timings are positive and the
scaling table has strong and weak efficiencies where both runs exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_bench_sharded_cpu_smoke(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_sharded.py"), "--cpu-smoke", "--gpus", "1,2,4",
           "--tokens", "8K,16K", "--mem-limit-gib", "0.005", "--reserve-gib", "0", "--iters", "2", "--warmup", "1",
           "--select", "1.0,0.5", "--chunks", "1,2", "--prefill-q", "8", "--prefill-iters", "1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=110, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SKIPPED" in proc.stdout and "blocked" in proc.stdout
    doc = json.loads(out.read_text())
    res = doc["results"]
    assert res["4"]["blocked"].startswith("blocked: needs 4")
    one = {e["label"]: e for e in res["1"]["sizes"]}
    assert "does not fit" in one["16K"]["skipped"]
    assert "decode" in one["8K"] and "prefill" in one["8K"]
    two = {e["label"]: e for e in res["2"]["sizes"]}
    for label in ("8K", "16K"):
        e = two[label]
        half = e["tokens"] // 512
        assert [tuple(r) for r in e["plan"]["ranges"]] in ([(0, half), (half, e["tokens"] // 256)],)
        for d in e["decode"]:
            assert d["chunks1_ms"] > 0 and d["chunks2_ms"] > 0 and d["local_ms"] > 0
        assert e["prefill"]["best_ms_per_layer"] > 0
    rows = {(r["gpus"], r["tokens"], r["what"]): r for r in doc["scaling"]}
    assert rows[(2, "8K", "decode sel=100%")]["strong_eff"] is not None
    assert rows[(2, "16K", "decode sel=100%")]["weak_eff"] is not None  # vs 1 worker at 8K
    assert rows[(2, "16K", "decode sel=100%")]["strong_eff"] is None  # 1 worker could not hold 16K
