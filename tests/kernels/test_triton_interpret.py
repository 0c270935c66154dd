"""The Triton kernels, run on CPU tensors by Triton's interpreter (no GPU needed).

TRITON_INTERPRET=1 has to be set before kernels.triton_attend is imported, and
must not leak into GPU tests in this process, so the whole grid runs once in a
subprocess (tests/kernels/_interp_runner.py) and each case is reported here as
its own test. Skips cleanly when triton is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._rmsnorm_cases import rmsnorm_cases
from ._step_cases import act_mul_cases, add_norm_cases, slot_write_cases
from ._tail_cases import tail_cases
from ._triton_grid import interpreter_cases

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels._interp_runner"],
        cwd=_REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"interpreter runner failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(interpreter_cases()) + [f"rmsnorm-{n}" for n in rmsnorm_cases()]
                         + [f"tail-{n}" for n in tail_cases()] + [f"act_mul-{n}" for n in act_mul_cases()]
                         + [f"slot_write-{n}" for n in slot_write_cases()]
                         + [f"add_norm-{n}" for n in add_norm_cases()])
def test_triton_interpreter_matches_reference(interpreter_results, name):
    result = interpreter_results.get(name, "missing from runner output")
    assert result == "ok", result
