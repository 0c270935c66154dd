from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from agentctx.retrieval import Embedder


def test_shapes_norms_and_similarity(embedder):
    v = embedder.embed(["The termination fee is due on exit.", "Cats sleep a lot.", ""])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    q = embedder.embed_query("What fee is payable on termination?")
    assert q @ v[0] > q @ v[1]


def test_cache_hit_means_zero_model_calls(embed_cache, embedder):
    texts = [f"Clause {i}: the Vendor shall deliver item {i * 7}." for i in range(12)]
    first = embedder.embed(texts)
    fresh = Embedder(cache_dir=embed_cache)  # a reloaded document in a new process
    again = fresh.embed(texts)
    assert fresh.model_calls == 0 and fresh.texts_encoded == 0 and fresh.cache_hits == 12
    assert np.array_equal(first, again)


def test_corrupt_cache_file_is_recomputed(tmp_path):
    e = Embedder(cache_dir=tmp_path)
    text = "A sentence whose cache file will be damaged."
    good = e.embed([text])[0]
    path = e._path(e.key(text))
    path.write_bytes(path.read_bytes()[:-7])  # truncated write
    e2 = Embedder(cache_dir=tmp_path)
    assert np.allclose(e2.embed([text])[0], good, atol=1e-6)
    assert e2.texts_encoded == 1
    path.write_bytes(b"garbage" * 100)
    e3 = Embedder(cache_dir=tmp_path)
    assert np.allclose(e3.embed([text])[0], good, atol=1e-6) and e3.texts_encoded == 1
    assert Embedder(cache_dir=tmp_path).embed([text]) is not None  # rewritten file reads back


def test_concurrent_writers_leave_valid_files(tmp_path):
    texts = [f"shared text number {i}" for i in range(8)]
    outs = []

    # float32 ONNX: a thread that finds some texts already written by another encodes the rest
    # as a smaller batch, and int8 vectors depend on their batch (dynamic activation scales,
    # up to 0.03 apart); float32 ones do not, so all threads must agree.
    def work():
        outs.append(Embedder(cache_dir=tmp_path, backend="onnx", device="cpu").embed(texts))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.allclose(o, outs[0], atol=1e-5) for o in outs)
    leftovers = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".tmp")]
    assert leftovers == []
    reader = Embedder(cache_dir=tmp_path, backend="onnx", device="cpu")
    reader.embed(texts)
    assert reader.model_calls == 0


def test_query_memo_and_dedup(tmp_path):
    e = Embedder(cache_dir=False)
    e.embed_queries(["same question?", "same question?", "other question?"])
    calls = e.model_calls
    e.embed_query("same question?")
    assert e.model_calls == calls
    assert e.texts_encoded == 2  # duplicates inside one call are encoded once


def test_a_query_vector_is_a_function_of_its_text(tmp_path):
    """The int8 encoder quantises activations with one scale per call, so the same question
    embedded with its expansion terms, in a batch, or read back from a passage batch in the disk
    cache got vectors up to ~0.02 of cosine apart, and plans moved with them."""
    q = "Can the licensee hand the licence to one of its sister companies?"
    def int8(cache_dir=False):
        return Embedder(cache_dir=cache_dir, backend="onnx-int8", device="cpu")
    alone = int8().embed_query(q)
    with_terms = int8().embed_queries([q, "assign assignment transfer its rights and obligations affiliate"])[0]
    long = "The Licensee shall not sublicense, assign or transfer this Agreement to any third party. " * 3
    in_batch = int8().embed_queries([long, q, "ok"])[1]
    int8(tmp_path).embed([long, q])  # the same text as a document passage, batched, cached on disk
    from_cache = int8(tmp_path).embed_query(q)
    for got in (with_terms, in_batch, from_cache):
        np.testing.assert_array_equal(got, alone)


@pytest.mark.skipif(sys.platform != "linux" or any(os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/kfd")),
                    reason="a GPU driver is loaded: the default device asks torch")
def test_default_device_without_a_gpu_driver_is_cpu_without_importing_torch(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "AGENTCTX_EMBED_DEVICE"}
    code = ("import sys; from agentctx.retrieval import Embedder; "
            "print(Embedder(cache_dir=False).device, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "cpu False"
