"""The MiniLM encoders agree with sentence-transformers; int8 vectors get a cache key of their own."""

import numpy as np
import pytest

from agentctx.retrieval.embedding import Embedder
from agentctx.retrieval.encoder import load_encoder

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
