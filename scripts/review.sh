#!/usr/bin/env bash
# The main job: set up, then review the bundled sample contract on the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/agentctx review agentctx/samples/sample_contract.txt --out out/review "$@"
