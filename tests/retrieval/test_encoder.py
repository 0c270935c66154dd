"""The MiniLM encoders agree with sentence-transformers; int8 vectors get a cache key of their own."""

import subprocess
import sys

import numpy as np
import pytest

from agentctx.retrieval import encoder as encoder_module
from agentctx.retrieval.embedding import Embedder
from agentctx.retrieval.encoder import BACKENDS, cache_tag_for, load_encoder

TEXTS = ["Either party may terminate this Agreement on ninety days' written notice.",
         "The Licensee may not assign this licence without the Licensor's prior written consent.",
         "Which court hears disputes?", "ok"]


# int8: sentences land at cosine >= 0.99 to float32; a two-letter text ("ok") at ~0.96.
@pytest.mark.parametrize("backend, min_cos, median_cos", [("onnx", 0.9999, 0.9999), ("onnx-int8", 0.95, 0.99)])
def test_onnx_encoders_agree_with_torch(backend, min_cos, median_cos):
    ref = load_encoder("cpu", "torch").encode(TEXTS)
    got = load_encoder("cpu", backend).encode(TEXTS, threads=1)
    assert got.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-4)
    cos = np.sum(ref * got, axis=1)
    assert float(np.min(cos)) >= min_cos and float(np.median(cos)) >= median_cos
    # Topical order survives quantisation: the assignment sentence is nearer a question about transfer.
    q = load_encoder("cpu", backend).encode(["Can the licence be transferred to someone else?"], threads=1)[0]
    assert got[1] @ q > got[0] @ q


def test_int8_vectors_are_cached_apart_from_float32(tmp_path):
    f32 = Embedder(cache_dir=tmp_path, backend="onnx", device="cpu")
    i8 = Embedder(cache_dir=tmp_path, backend="onnx-int8", device="cpu")
    assert f32.key("x") != i8.key("x")
    assert Embedder(cache_dir=tmp_path, backend="torch", device="cpu").key("x") == f32.key("x")
    a, b = f32.embed(TEXTS[:2]), i8.embed(TEXTS[:2])
    assert i8.cache_hits == 0 and not np.array_equal(a, b)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="onnx-int8"):
        load_encoder("cpu", "tflite")


# Keys of "x" as the code before cache_tag_for made them (reading the loaded encoder's tag), on CPU
# with onnxruntime installed: float32 vectors share one key, int8 ones ("auto" picks int8) another.
_F32_KEY = "ff3af3c35710147e8e10acfbf43905893fbb941c69420a8a7f7c5087478afd51"
_INT8_KEY = "554c6fbeb2d5ff116ed76dccefd21c5d27fddb2f97976f5ab0b4c1eccc6b2e72"
KEYS_BEFORE = {"torch": _F32_KEY, "onnx": _F32_KEY, "onnx-int8": _INT8_KEY, "auto": _INT8_KEY}


def _as_a_new_process_that_cannot_load_encoders(monkeypatch) -> None:
    """From here on no encoder is loaded in this process, and loading one fails the test."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the sentence encoder was loaded")

    monkeypatch.setattr(encoder_module, "_ENCODERS", {})
    monkeypatch.setattr(encoder_module, "TorchEncoder", refuse)
    monkeypatch.setattr(encoder_module, "_onnx_encoder", refuse)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_are_those_of_before_without_loading_and_after(backend, tmp_path, monkeypatch):
    _as_a_new_process_that_cannot_load_encoders(monkeypatch)
    assert Embedder(cache_dir=tmp_path, backend=backend, device="cpu").key("x") == KEYS_BEFORE[backend]
    monkeypatch.undo()  # the real encoder: its own tag gives the same key
    e = Embedder(cache_dir=tmp_path, backend=backend, device="cpu")
    assert e.encoder.cache_tag == cache_tag_for("cpu", backend) and e.key("x") == KEYS_BEFORE[backend]


def test_off_cpu_every_backend_is_torch_without_a_tag(monkeypatch):
    _as_a_new_process_that_cannot_load_encoders(monkeypatch)
    # load_encoder builds ONNX encoders on CPU only; elsewhere it is torch, whose vectors are float32.
    assert [cache_tag_for("cuda", b) for b in BACKENDS] == [""] * len(BACKENDS)
    assert Embedder(cache_dir=False, backend="onnx-int8", device="cuda").key("x") == _F32_KEY


def test_a_cache_only_run_loads_no_encoder(tmp_path, monkeypatch):
    first = Embedder(cache_dir=tmp_path, device="cpu").embed(TEXTS)  # auto: fills the cache
    _as_a_new_process_that_cannot_load_encoders(monkeypatch)
    again = Embedder(cache_dir=tmp_path, device="cpu")  # finds every text cached
    assert np.array_equal(again.embed(TEXTS), first)
    assert again.model_calls == 0 and again.cache_hits == len(TEXTS)


class _Float32Encoder:
    name, cache_tag = "onnx", ""

    def encode(self, texts, *, batch_size=64, threads=None):
        return np.tile(np.eye(1, 384, dtype=np.float32), (len(texts), 1))


def test_auto_falling_back_from_int8_rekeys_before_writing(tmp_path, monkeypatch):
    """``auto`` expects int8 on CPU; when the int8 graph fails its probe, the float32 vectors it
    falls back to are neither mixed with cached int8 ones nor written under int8 keys."""
    fallback = _Float32Encoder()
    monkeypatch.setattr(encoder_module, "_ENCODERS", {})
    monkeypatch.setattr(encoder_module, "_onnx_encoder", lambda _dir, name: fallback if name == "onnx" else None)
    e = Embedder(cache_dir=tmp_path, backend="auto", device="cpu")
    assert e.key("x") == _INT8_KEY  # expected before loading
    int8_vec = np.full(384, 384 ** -0.5, dtype=np.float32)
    e._write(e.key(TEXTS[0]), int8_vec)  # an int8 vector cached by an earlier run
    out = e.embed(TEXTS[:2])
    assert np.array_equal(out, fallback.encode(TEXTS[:2])) and e.cache_hits == 0
    assert e.key("x") == _F32_KEY and e._read(e.key(TEXTS[1])) is not None
    assert np.array_equal(e._read(e._key(TEXTS[0], "int8")), int8_vec)  # left as it was


def test_tokenizer_is_transformers_own(wordpiece_tokenizer):
    """The encoder's ``tokenizers`` tokenizer gives the ids and mask of transformers' AutoTokenizer
    called as the encoder used to call it (padding to the longest, truncation at 256)."""
    texts = TEXTS + ["", "Café naïve — “quoted” 中文 😀\tx\ny", "word " * 400, "x" * 3000]
    want = wordpiece_tokenizer(texts, padding=True, truncation=True, max_length=encoder_module.MAX_SEQ_TOKENS,
                               return_tensors="np")
    got = encoder_module.load_tokenizer().encode_batch(texts)
    assert np.array_equal(np.array([e.ids for e in got]), want["input_ids"])
    assert np.array_equal(np.array([e.attention_mask for e in got]), want["attention_mask"])


def test_probe_reference_is_made_once_then_read(tmp_path, monkeypatch):
    ref = encoder_module._probe_reference(tmp_path)  # torch, once
    assert ref.shape == (len(encoder_module._PROBE), 384) and ref.dtype == np.float32
    with monkeypatch.context() as m:
        m.setattr(encoder_module, "TorchEncoder", None)  # read from the cache: no torch
        assert np.array_equal(encoder_module._probe_reference(tmp_path), ref)
    (path,) = (tmp_path / "onnx").glob("*.probe.*.npy")
    path.write_bytes(path.read_bytes()[:100])  # torn: made again
    assert np.array_equal(encoder_module._probe_reference(tmp_path), ref)


def test_a_new_process_loads_the_cached_onnx_encoder_quietly_without_torch(tmp_path):
    """Once the cache holds the graph and the probe's reference, a new process loads the encoder
    without importing torch, transformers or sentence-transformers, and writes nothing to stderr."""
    from agentctx.common import settings

    cache = settings.cache_dir()
    load_encoder("cpu", "onnx-int8")  # makes the graph, and the reference, if this cache lacks them
    encoder_module._probe_reference(cache)
    code = ("import sys; from agentctx.retrieval.encoder import load_encoder; "
            f"e = load_encoder('cpu', 'onnx-int8', cache_dir={str(cache)!r}); "
            "print(e.name, e.encode(['ok'], threads=1).shape, "
            "sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "onnx-int8 (1, 384) []" and run.stderr == ""


def test_loading_torch_weights_draws_no_progress_bar(capfd):
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()
    encoder_module.TorchEncoder("cpu")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s" not in err, err
    assert hf_logging.is_progress_bar_enabled() == before  # the process-wide setting is restored
