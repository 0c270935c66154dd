"""Marks for the compiled-Triton GPU tests: gpu-marked, skipped without CUDA or triton."""

from __future__ import annotations

import importlib.util

import pytest
import torch

GPU_TRITON = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]
