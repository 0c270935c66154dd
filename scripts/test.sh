#!/usr/bin/env bash
# The test suite: set up, lint (ruff, configured in pyproject.toml), then pytest (the fixtures
# start a real redis-server and a local Ray).
# Default selection excludes gpu / slow / vllm tests (see pyproject.toml); pass -m to change it.
# Run with no arguments (as CI does), it then runs the vLLM engine tests in their own venv
# (scripts/test_vllm.sh; AGENTCTX_TEST_VLLM=0 skips that stage).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
if [ $# -eq 0 ] && [ "${AGENTCTX_TEST_VLLM:-1}" = 1 ]; then
  bash scripts/test_vllm.sh
fi
