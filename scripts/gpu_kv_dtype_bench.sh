#!/usr/bin/env bash
# Quantised KV pages on the device (issue 30, BENCHMARKS §3b): the GPU tests, then the engine loop
# with bf16 pages beside fp8 pages in the same call. Results land in $2 (default
# bench/results/kv_dtype_gpu). Each part fits one device call (10 minutes):
#   bash scripts/gpu_kv_dtype_bench.sh a OUTDIR   # GPU tests; Llama-3-8B arch 128K, 16 agents, bf16 vs fp8
#   bash scripts/gpu_kv_dtype_bench.sh b OUTDIR   # Gemma-3-270M arch 1M, 16 agents, bf16 vs fp8; and on a
#                                                 # card with > 100 GiB, Llama-3-8B arch at 1M in fp8
set -uo pipefail
cd "$(dirname "$0")/.."
part="${1:?part a or b}"
out="${2:-bench/results/kv_dtype_gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip_install.log" 2>&1 \
  || { echo "pip install -e . failed"; tail -5 "$out/pip_install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
b=bench/bench_scheduler.py
case "$part" in
  a)
    # The quantised-page tests and the bf16 kernels and decode rows they share code with.
    timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_union_quant_gpu.py \
      tests/serving/test_quant_kv_gpu.py tests/kernels/test_union_gpu.py tests/kernels/test_attend_quant_gpu.py \
      tests/serving/test_batch_slots_gpu.py tests/kernels/test_triton_gpu.py > "$out/gpu_tests.log" 2>&1
    echo "gpu tests rc=$?"; grep -E "passed|failed" "$out/gpu_tests.log" | tail -1; grep -E "^FAILED|Error" "$out/gpu_tests.log" | head -20
    for dt in bf16 fp8_e4m3; do
      timeout 130 python3 $b --model llama3-8b-random --tokens 131072 --agents 16 --budgets 0.12,dense \
        --peers union --new-tokens 32 --kv-dtype $dt --doc-kv random --out "$out/llama_128k_$dt.json" 2>&1 | tail -8 | tee "$out/llama_128k_$dt.log"
    done
    # fp8 with its dots in bf16 (kernels.triton_dequant.dot_f16 off): the A/B of the fp16 dot
    AGENTCTX_QUANT_DOT_F16=0 timeout 130 python3 $b --model llama3-8b-random --tokens 131072 --agents 16 --budgets 0.12 \
      --peers union --new-tokens 32 --kv-dtype fp8_e4m3 --doc-kv random --out "$out/llama_128k_fp8_bf16dot.json" 2>&1 \
      | tail -8 | tee "$out/llama_128k_fp8_bf16dot.log" ;;
  b)
    for dt in bf16 fp8_e4m3; do
      timeout 170 python3 $b --model gemma3-270m-random --tokens 1048576 --agents 16 --budgets 0.12 \
        --peers union --kv-dtype $dt --doc-kv random --out "$out/gemma_1m_$dt.json" 2>&1 | tail -8 | tee "$out/gemma_1m_$dt.log"
    done
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    if [ "${mem:-0}" -gt 102400 ]; then
      timeout 220 python3 $b --model llama3-8b-random --tokens 1048576 --agents 16 --budgets 0.12 \
        --peers union --new-tokens 32 --kv-dtype fp8_e4m3 --doc-kv random --out "$out/llama_1m_fp8_e4m3.json" 2>&1 | tail -8 \
        | tee "$out/llama_1m_fp8_e4m3.log"
    fi ;;
  *) echo "part a or b" >&2; exit 2 ;;
esac
