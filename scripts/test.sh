#!/usr/bin/env bash
# The test suite: set up, then pytest (the fixtures start a real redis-server and a local Ray).
# Default selection excludes gpu / slow / vllm tests (see pyproject.toml); pass -m to change it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
