#!/usr/bin/env bash
# On a CUDA machine whose image already has torch, triton and transformers (no set-up, no
# network): the GPU tests, the window kernel's split-K counts, the shared-prefill paths side by
# side, then the per-forward profile side by side. Writes logs to $OUT (default ./out/gpu) and
# prints a summary. Used with the device tool; ~8 min on an H200.
#   bash scripts/gpu_check.sh                 # tests + prefill paths + Gemma 1M profile
#   GPU_CHECK_PROFILE=0 bash scripts/gpu_check.sh      # tests only
#   GPU_CHECK_PREFILL=none bash scripts/gpu_check.sh   # no prefill paths
#   GPU_CHECK_LLAMA=1 bash scripts/gpu_check.sh        # also the Llama-8B 32K profile
#   GPU_CHECK_PROFILE=0 GPU_CHECK_ENGINE=1 bash scripts/gpu_check.sh   # tests, then the engine loop
#       benchmark (bench/bench_scheduler.py: Gemma 1M 1/4/16 agents, union and row-by-row peers,
#       12% and dense; head of line at 128K), JSON to $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"
mkdir -p "$out"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
# The code imports as agentctx.* (pyproject.toml maps the folders): install this copy, editable,
# with the image's own torch/triton/transformers (no dependencies, no network, no build isolation).
if ! "$py" -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip_install.log" 2>&1; then
  echo "pip install -e . FAILED (see $out/pip_install.log); agentctx.* will not import:" >&2
  tail -5 "$out/pip_install.log" >&2
fi
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader || true
t0=$SECONDS
gpu_tests=(tests/kernels/test_tail_merge_gpu.py tests/kernels/test_union_gpu.py tests/kernels/test_rmsnorm_gpu.py
           tests/kernels/test_triton_gpu.py tests/kernels/test_positional.py tests/serving/test_model_runner_gpu.py
           tests/serving/test_batch_slots_gpu.py tests/kernels/test_attend_quant_gpu.py
           tests/kernels/test_union_quant_gpu.py tests/serving/test_quant_kv_gpu.py)
[ -f tests/kernels/test_rope_gpu.py ] && gpu_tests+=(tests/kernels/test_rope_gpu.py tests/serving/test_fused_rope.py)
[ -f tests/serving/test_fused_proj.py ] && gpu_tests+=(tests/serving/test_fused_proj.py)
timeout 480 "$py" -m pytest -q -m gpu -p no:cacheprovider "${gpu_tests[@]}" > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? ($((SECONDS - t0)) s)"; grep -E "passed|failed" "$out/gpu_tests.log" | tail -1
grep -E "^FAILED" "$out/gpu_tests.log" | head -20
if [ "${GPU_CHECK_PROFILE:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 90 "$py" bench/experiments/window_splits.py > "$out/window_splits.log" 2>&1
  echo "window splits rc=$? ($((SECONDS - t0)) s)"; grep -E "^\||^#" "$out/window_splits.log"
  if [ "${GPU_CHECK_PREFILL:-}" != none ]; then
    t0=$SECONDS
    timeout 150 "$py" bench/experiments/prefill_paths.py --model gemma3-270m-random --tokens "${GPU_CHECK_PREFILL:-32k,128k,512k}" \
      --reps 1 > "$out/prefill_paths.log" 2>&1
    echo "prefill paths rc=$? ($((SECONDS - t0)) s)"; grep -E "^\||first-call" "$out/prefill_paths.log"
  fi
  t0=$SECONDS
  timeout 150 "$py" bench/experiments/profile_step.py --tokens "${GPU_CHECK_TOKENS:-1048576}" > "$out/profile_gemma.log" 2>&1
  echo "gemma profile rc=$? ($((SECONDS - t0)) s)"
  if [ "${GPU_CHECK_LLAMA:-0}" = 1 ]; then
    timeout 150 "$py" bench/experiments/profile_step.py --model llama3-8b-random --tokens 32768 > "$out/profile_llama32k.log" 2>&1
  fi
  grep -hE "forward|launches|interleaved|first-call" "$out"/profile_*.log
fi
if [ "${GPU_CHECK_ENGINE:-0}" = 1 ]; then
  t0=$SECONDS
  timeout 330 "$py" bench/bench_scheduler.py --model gemma3-270m-random --tokens 1048576 --agents 1,4,16 \
    --budgets 0.12,dense --peers union,rows --out "$out/sched_gemma_1m.json" > "$out/sched_gemma_1m.log" 2>&1
  echo "engine bench gemma 1M rc=$? ($((SECONDS - t0)) s)"; grep -E "agents|head-of-line" "$out/sched_gemma_1m.log"
  t0=$SECONDS
  timeout 150 "$py" bench/bench_scheduler.py --model gemma3-270m-random --tokens 131072 --agents 64 \
    --budgets 0.12 --peers union --hol --out "$out/sched_gemma_128k.json" > "$out/sched_gemma_128k.log" 2>&1
  echo "engine bench gemma 128K rc=$? ($((SECONDS - t0)) s)"; grep -E "agents|head-of-line" "$out/sched_gemma_128k.log"
fi
