"""HTTP-suite fixtures: a tiny checkpoint per session (the real-model tests use the embedded Gemma)."""

from __future__ import annotations

import pytest

from tests.factories import make_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    return make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("tiny-gemma") / "ckpt")
