#!/usr/bin/env bash
# vLLM engine tests (marked vllm) in the vLLM venv; set up on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
exec "${AGENTCTX_VLLM_VENV:-.venv-vllm}/bin/python" -m pytest -q -m vllm -p no:cacheprovider tests/vllm "$@"
