#!/usr/bin/env bash
# The engine-loop benchmarks of BENCHMARKS §4h on the GPU machine, in two parts that each fit one
# device call (10 minutes). Results land in $1 (default bench/results/engine_gpu).
#   bash scripts/gpu_engine_bench.sh a OUTDIR   # Gemma arch 1M: the engine (union, rows) and the
#                                               # engine before (.old/pkg, see below), same machine
#   bash scripts/gpu_engine_bench.sh b OUTDIR   # Llama-8B arch 128K, Gemma arch 128K with the
#                                               # review's plans, head of line
#   bash scripts/gpu_engine_bench.sh c OUTDIR   # the decode step's fusions (act_mul, slot writes,
#                                               # sandwich layers): this tree against .old/fc (the
#                                               # commit before them, fc68a70, unpacked as below),
#                                               # Gemma arch 1M and Llama-8B arch 128K, 16 agents at
#                                               # 12%, peers alternating; then a profile of this tree
#   bash scripts/gpu_engine_bench.sh d OUTDIR   # greedy decode windows: 4 forwards per host sync
#                                               # against 1, and the slot kernels' P @ V in fp32
#                                               # against bf16, same tree, peers alternating (Gemma
#                                               # arch 1M x2, Llama-8B arch 128K); head of line; profile
#   bash scripts/gpu_engine_bench.sh h OUTDIR   # issue 33's and 30's H200 targets in one call: Gemma
#                                               # arch 1M 1/16 agents at 12% and dense (union, rows,
#                                               # dense-cascade peers), Llama-8B arch 128K 16 agents,
#                                               # and on a card over 100 GiB Llama-8B arch 1M in fp8
# The "before" peer is a commit's tree unpacked into .old/pkg with its package dirs moved under
# agentctx/ (so it imports its own code, never this checkout's editable install):
#   mkdir -p .old/pkg && git archive f7dc6b9 | tar -x -C .old/pkg
#   (cd .old/pkg && for d in common entrypoints kernels kv_store pipelines retrieval serving; do mv $d agentctx/; done)
# and travels with the call through `carry: [".old"]`.
set -uo pipefail
cd "$(dirname "$0")/.."
part="${1:?part a or b}"
out="${2:-bench/results/engine_gpu}"
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the "before" peer runs from /tmp
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip_install.log" 2>&1 \
  || { echo "pip install -e . failed"; cat "$out/pip_install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
b=bench/bench_scheduler.py
case "$part" in
  a)
    timeout 330 python3 $b --model gemma3-270m-random --tokens 1048576 --agents 1,16 \
      --budgets 0.12,dense --peers union,rows --out "$out/gemma_1m.json" 2>&1 | tee "$out/gemma_1m.log"
    if [ -d .old/pkg ]; then
      root=$(pwd)
      (cd /tmp && timeout 200 python3 "$root/.old/pkg/bench/bench_scheduler.py" --model gemma3-270m-random \
        --tokens 1048576 --agents 1,16 --budgets 0.12,dense --out "$out/before_gemma_1m.json") 2>&1 \
        | tee "$out/before_gemma_1m.log"
    fi ;;
  b)
    timeout 200 python3 $b --model llama3-8b-random --tokens 131072 --agents 16 --budgets 0.12,dense \
      --peers union,rows --new-tokens 32 --out "$out/llama_128k.json" 2>&1 | tee "$out/llama_128k.log"
    timeout 200 python3 $b --model gemma3-270m-random --tokens 131072 --agents 16,64 --budgets 0.12,real,dense \
      --peers union --plans bench/results/review_plans_128k.json --out "$out/gemma_128k.json" 2>&1 \
      | tee "$out/gemma_128k.log"
    timeout 150 python3 $b --model gemma3-270m-random --tokens 131072 --agents 4,16 --budgets 0.12 \
      --peers union --hol --hol-tokens 32768 --out "$out/hol_gemma_128k.json" 2>&1 | tee "$out/hol_gemma_128k.log" ;;
  c)
    root=$(pwd)
    # Gemma 1M twice (peers alternating), Llama 128K once: six runs, each the document's KV drawn at random.
    for run in "gemma3-270m-random 1048576 1" "llama3-8b-random 131072 1" "gemma3-270m-random 1048576 2"; do
      set -- $run
      for peer in this before; do
        name="${1%%-*}_${2}_${peer}_$3"
        if [ $peer = this ]; then
          timeout 150 python3 $b --model $1 --tokens $2 --agents 16 --budgets 0.12 --peers union --new-tokens 32 \
            --doc-kv random --out "$out/$name.json" 2>&1 | tail -4 | tee "$out/$name.log"
        elif [ -d .old/fc ]; then
          (cd /tmp && timeout 150 python3 "$root/.old/fc/bench/bench_scheduler.py" --model $1 --tokens $2 --agents 16 \
            --budgets 0.12 --peers union --new-tokens 32 --doc-kv random --out "$out/$name.json") 2>&1 | tail -4 \
            | tee "$out/$name.log"
        fi
      done
    done
    timeout 150 python3 bench/experiments/profile_engine_step.py --model gemma3-270m-random --tokens 1048576 \
      --agents 16 > "$out/profile_gemma_1m_16.txt" 2>&1; head -25 "$out/profile_gemma_1m_16.txt" ;;
  d)
    # Windows of 4 against 1 (and, at 4, the slot kernels' P @ V in fp32 against bf16), peers alternating.
    for run in "gemma3-270m-random 1048576 1" "llama3-8b-random 131072 1" "gemma3-270m-random 1048576 2"; do
      set -- $run
      for cfg in "1 0" "4 0" "4 1"; do
        set -- $run $cfg
        [ "$1" = llama3-8b-random ] && [ "$5" = 1 ] && continue
        name="${1%%-*}_${2}_window${4}_pvfp32${5}_$3"
        AGENTCTX_SLOT_PV_FP32=$5 timeout 120 python3 $b --model $1 --tokens $2 --agents 16 --budgets 0.12 \
          --peers union --new-tokens 32 --doc-kv random --decode-steps $4 --out "$out/$name.json" 2>&1 | tail -1 \
          | tee "$out/$name.log"
      done
    done
    timeout 150 python3 $b --model gemma3-270m-random --tokens 131072 --agents 4,16 --budgets 0.12 \
      --peers union --hol --hol-tokens 32768 --out "$out/hol_gemma_128k.json" 2>&1 | tail -4 | tee "$out/hol.log"
    timeout 120 python3 bench/experiments/profile_engine_step.py --model gemma3-270m-random --tokens 1048576 \
      --agents 16 > "$out/profile_gemma_1m_16.txt" 2>&1; head -16 "$out/profile_gemma_1m_16.txt" ;;
  h)
    timeout 200 python3 $b --model gemma3-270m-random --tokens 1048576 --agents 1,16 --budgets 0.12,dense \
      --peers union,rows --new-tokens 32 --doc-kv random --out "$out/gemma_1m.json" 2>&1 | tail -12 | tee "$out/gemma_1m.log"
    timeout 150 python3 $b --model llama3-8b-random --tokens 131072 --agents 16 --budgets 0.12,dense \
      --peers union --new-tokens 32 --doc-kv random --out "$out/llama_128k.json" 2>&1 | tail -8 | tee "$out/llama_128k.log"
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    if [ "${mem:-0}" -gt 102400 ]; then
      timeout 200 python3 $b --model llama3-8b-random --tokens 1048576 --agents 16 --budgets 0.12 \
        --peers union --new-tokens 32 --kv-dtype fp8_e4m3 --doc-kv random --out "$out/llama_1m_fp8.json" 2>&1 \
        | tail -8 | tee "$out/llama_1m_fp8.log"
    fi ;;
  *) echo "part a, b, c, d or h" >&2; exit 2 ;;
esac
