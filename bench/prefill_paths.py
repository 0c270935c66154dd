"""Shared-prefill throughput: fused/banded attention paths vs the square fp32 paths, and
transformers' own forward, side by side in one process (CPU by default).

    python bench/prefill_paths.py                 # real Gemma 3 270M, 8K tokens, CPU
    python bench/prefill_paths.py --tokens 4096 --model PATH

"square fp32" forces what the runner did before: blockwise fp32 attention for the chunk's
causal part, the previous pages and the sliding window (kernels.positional with the fused
kernels refused). All three produce the same last-token logits (checked).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="checkpoint dir (default: the embedded Gemma 3 270M)")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import kernels.positional as kp
    import serving.model_runner as mr
    from serving.model_loader import load_model

    loaded = load_model(args.model, device="cpu")
    runner = mr.ModelRunner(loaded, page_size=256, prefill_chunk_tokens=args.chunk,
                            max_context_tokens=max(args.tokens, 1 << 20))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, loaded.model.config.vocab_size - 10, (args.tokens,), generator=g).tolist()

    def square(q, keys, vals, q_start, k_start, scale, window, softcap=None, block=None):
        qpos = torch.arange(q_start, q_start + q.shape[0])
        kpos = torch.arange(k_start, k_start + keys.shape[0])
        return kp.masked_attention_lse(q, keys, vals, qpos, kpos, scale, window=window, softcap=softcap)[0]

    def timed(label, fn):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        print(f"{label:>28}: {dt:7.2f} s  {args.tokens / dt:7.0f} tok/s", flush=True)
        return out, dt

    with torch.inference_mode():
        runner.prefill(ids[: args.chunk], progress=False)  # warm-up
        new, t_new = timed("fused + banded (now)", lambda: runner.prefill(ids, progress=False).last_logits)
        with mock.patch.object(mr, "sliding_window_attention", square), \
                mock.patch.object(kp, "_flash_op", lambda *a, **k: None):
            old, t_old = timed("square fp32 (before)", lambda: runner.prefill(ids, progress=False).last_logits)
        ref, t_ref = timed("transformers forward", lambda: runner.reference_logits(ids)[-1])
    print(f"now vs before: {t_old / t_new:.2f}x; now vs transformers: {t_ref / t_new:.2f}x; "
          f"max |logit diff| now-before {(new - old).abs().max().item():.2e}, now-transformers "
          f"{(new - ref).abs().max().item():.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
