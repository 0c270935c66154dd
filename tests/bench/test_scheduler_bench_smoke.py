"""bench/bench_scheduler.py end to end on CPU with a tiny random model (static mode, no graphs):
every case runs for both peers (union pages, rows on their own pages), rows share steps, and the
head-of-line case reports."""

from __future__ import annotations

import json

import pytest


@pytest.mark.timeout(300)
def test_scheduler_bench_tiny_cpu(tmp_path):
    from bench.bench_scheduler import main

    out = main(["--model", "tiny-gemma3", "--tokens", "1024", "--agents", "1,4", "--budgets", "0.12,dense",
                "--new-tokens", "4", "--prompt-tokens", "6", "--page-size", "64", "--recent-tokens", "64",
                "--hol", "--hol-tokens", "600", "--out", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["tokens"] == 1024
    by = {(r["budget"], r["peer"], r["agents"]): r for r in out["results"]}
    assert set(by) == {(b, p, n) for b in ("0.12", "dense") for p in ("union", "rows") for n in (1, 4)}
    assert by[("0.12", "union", 4)]["rows_per_step"] > 1 and by[("dense", "union", 1)]["pages_each"] is None
    # Four random 12% plans of 16 pages overlap: their union is less than four times one plan.
    assert by[("0.12", "union", 4)]["union_share"] < 1.0 and by[("dense", "rows", 4)]["union_share"] == 1.0
    assert all(r["loop_syncs_per_step"] <= 1.0 for r in out["results"])
    assert all(r["tok_per_s"] > 0 and r["ttft_p99_ms"] >= r["ttft_p50_ms"] for r in out["results"])
    assert out["head_of_line"]["busy_n"] >= 1


@pytest.mark.timeout(300)
def test_scheduler_bench_int8_random_kv_cpu():
    """--kv-dtype int8: the document's KV drawn at random straight into int8 pages (no prefill),
    decoded through both peers; the floor counts the quantised pages' bytes."""
    from bench.bench_scheduler import main

    out = main(["--model", "tiny-llama", "--tokens", "700", "--agents", "2", "--budgets", "0.25,dense",
                "--new-tokens", "3", "--prompt-tokens", "5", "--page-size", "64", "--recent-tokens", "64",
                "--kv-dtype", "int8"])
    assert out["kv_dtype"] == "int8" and out["doc_kv"] == "random"
    assert len(out["results"]) == 4 and all(r["tok_per_s"] > 0 for r in out["results"])
