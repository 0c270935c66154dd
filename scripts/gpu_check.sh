#!/usr/bin/env bash
# On a CUDA machine whose image already has torch, triton and transformers (no set-up, no
# network): the GPU tests, then the per-forward profile side by side. Writes logs to $OUT
# (default ./out/gpu) and prints a summary. Used with the device tool; ~5 min on an H200.
#   bash scripts/gpu_check.sh            # tests + Gemma 32K and Llama-8B 32K profiles
#   GPU_CHECK_PROFILE=0 bash scripts/gpu_check.sh   # tests only
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"
mkdir -p "$out"
py="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader || true
timeout 330 "$py" -m pytest -q -m gpu -p no:cacheprovider \
  tests/kernels/test_tail_merge_gpu.py tests/kernels/test_rmsnorm_gpu.py tests/kernels/test_triton_gpu.py \
  tests/kernels/test_positional.py tests/serving/test_model_runner_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed" "$out/gpu_tests.log" | tail -1
grep -E "^FAILED" "$out/gpu_tests.log" | head -20
if [ "${GPU_CHECK_PROFILE:-1}" = 1 ]; then
  timeout 120 "$py" bench/profile_step.py --tokens 32768 > "$out/profile_gemma32k.log" 2>&1
  timeout 150 "$py" bench/profile_step.py --model llama3-8b-random --tokens 32768 > "$out/profile_llama32k.log" 2>&1
  grep -hE "forward|launches|interleaved" "$out"/profile_*.log
fi
