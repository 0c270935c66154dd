"""Shared-prefill throughput by sliding-layer path, and transformers' own forward, side by side
in one process.

    python bench/experiments/prefill_paths.py                                  # CPU: real Gemma 3 270M, 8K tokens
    python bench/experiments/prefill_paths.py --model gemma3-270m-random --tokens 32k,128k,1m   # CUDA (H200)

Paths of a prefill chunk's sliding-window layers (ModelRunner.sliding_prefill):
"kernel" = the Triton band kernel (CUDA only; "kernel-m64" with 64-row tiles instead of 16),
"banded" = SDPA band by band, "square" = blockwise fp32 with a positional mask over
[previous window | chunk]. With ``--old`` also "square, no flash": the global layers' prefix
and causal parts on the fp32 path too (what the runner did before the fused paths). Every path's
last-token logits are compared with the banded path's and, up to ``--ref-max`` tokens, with
transformers' one-shot forward.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402


def _size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1024, "m": 1 << 20}.get(s[-1], 1)
    return int(s.rstrip("km")) * mult


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None,
                    help="checkpoint dir, or a bench model name (gemma3-270m-random, llama3-8b-random); "
                         "default: the embedded Gemma 3 270M")
    ap.add_argument("--tokens", default="8k", help="comma-separated sizes, e.g. 32k,128k,1m")
    ap.add_argument("--chunk", type=int, default=None, help="prefill chunk (default 4096 CUDA, 1024 CPU)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--reps", type=int, default=None, help="timed prefills per path (default 2 CUDA, 1 CPU)")
    ap.add_argument("--ref-max", type=int, default=None,
                    help="largest size for transformers' one-shot forward (default 32768 CUDA, 8192 CPU)")
    ap.add_argument("--old", action="store_true", help="also the square path with the global layers' flash off")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = dev.type == "cuda"
    chunk = args.chunk or (4096 if cuda else 1024)
    reps = args.reps or (2 if cuda else 1)
    ref_max = args.ref_max if args.ref_max is not None else (32768 if cuda else 8192)
    sizes = [_size(s) for s in args.tokens.split(",")]

    import agentctx.kernels.positional as kp
    import agentctx.serving.runner.model_runner as mr
    from agentctx.kernels import tail_merge, tail_tiles

    if args.model and not Path(args.model).exists():
        from bench.lib.models import build_model

        loaded, info = build_model(args.model, dev, seed=0)
    else:
        from agentctx.serving.model_loader import load_model

        loaded = load_model(args.model, device=str(dev), dtype=torch.bfloat16 if cuda else torch.float32)
        info = {"weights": "real"}
    runner = mr.ModelRunner(loaded, page_size=256, prefill_chunk_tokens=chunk, max_context_tokens=max(sizes))
    name = args.model or "embedded Gemma 3 270M"
    print(f"# {name} ({info.get('weights')}, {runner.dtype}), {dev}"
          f"{' ' + torch.cuda.get_device_name(dev) if cuda else ''}, chunk {chunk}, best of {reps}", flush=True)

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    # label -> (ModelRunner.sliding_prefill, patches applied while it runs)
    no_flash = partial(mock.patch.object, kp, "_flash_op", lambda *a, **k: None)
    tile_64 = partial(mock.patch.object, tail_tiles, "WINDOW_BLOCK_M", 64)  # the tiles as first written
    paths = {"kernel": ("kernel", []), "kernel-m64": ("kernel", [tile_64])} if cuda else {}
    paths |= {"banded": ("banded", []), "square": ("square", [])}
    if args.old:
        paths["square, no flash"] = ("square", [no_flash])
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        ids = torch.randint(10, loaded.model.config.vocab_size - 10, (n,), generator=g).tolist()
        logits, secs = {}, {}
        with torch.inference_mode():
            for path, (sliding, make_patches) in paths.items():
                runner.sliding_prefill = sliding
                patches = [make() for make in make_patches]
                for patch in patches:
                    patch.start()
                try:
                    runner.prefill(ids[: 2 * chunk], progress=False)  # warm-up: compile, check, allocate
                    best = float("inf")
                    for _ in range(reps):
                        sync()
                        t0 = time.perf_counter()
                        doc = runner.prefill(ids, progress=False)
                        sync()
                        best = min(best, time.perf_counter() - t0)
                        logits[path] = doc.last_logits.float().cpu()
                        del doc
                finally:
                    for patch in patches:
                        patch.stop()
                secs[path] = best
                print(f"{n:>8} {path:>18}: {best:8.2f} s {n / best:9.0f} tok/s", flush=True)
            if n <= ref_max:
                sync()
                t0 = time.perf_counter()
                logits["transformers"] = runner.reference_logits(ids)[-1].float().cpu()
                sync()
                secs["transformers"] = time.perf_counter() - t0
                print(f"{n:>8} {'transformers':>18}: {secs['transformers']:8.2f} s "
                      f"{n / secs['transformers']:9.0f} tok/s (one shot)", flush=True)
        base = logits["banded"]
        for path, t in secs.items():
            rel = ((logits[path] - base).norm() / base.norm()).item()
            rows.append((n, path, t, n / t, secs["banded"] / t, rel))
    checked = {sig: ok for sig, ok in tail_merge._checked.items() if sig[0] == "window"}
    if checked:
        print(f"window kernel first-call checks: {checked}")
    print("\n| tokens | path | s | tok/s | speed vs banded | last logits rel diff vs banded |")
    print("|---:|---|---:|---:|---:|---:|")
    for n, path, t, tps, ratio, rel in rows:
        print(f"| {n} | {path} | {t:.2f} | {tps:,.0f} | {ratio:.2f}x | {rel:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
