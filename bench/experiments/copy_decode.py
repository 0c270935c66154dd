"""Decode step cost with full logits vs only a few tokens' logits (copy-constrained steps),
side by side in one process on the real Gemma 3 270M (CPU by default).

    python bench/experiments/copy_decode.py [--tokens 2048] [--steps 20] [--allowed 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--allowed", type=int, default=8, help="tokens a copy-constrained step may take")
    args = ap.parse_args()
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.runner.model_runner import ModelRunner

    loaded = load_model(args.model)
    runner = ModelRunner(loaded, page_size=256, prefill_chunk_tokens=1024)
    g = torch.Generator().manual_seed(0)
    vocab = loaded.model.config.vocab_size
    ids = torch.randint(10, vocab - 10, (args.tokens,), generator=g).tolist()
    doc = runner.prefill(ids, progress=False)
    allowed = sorted(torch.randint(10, vocab - 10, (args.allowed,), generator=g).tolist())
    pages = [0, doc.num_pages - 1]
    res = {}
    with torch.inference_mode():
        for _rep in range(2):
            for label, kw in (("full logits", {}), (f"{args.allowed} allowed logits", {"logit_ids": allowed})):
                tail = runner.new_tail(doc)
                runner.extend(doc, tail, ids[:16], pages)
                t0 = time.perf_counter()
                for i in range(args.steps):
                    runner.extend(doc, tail, [ids[i]], pages, **kw)
                res[label] = (time.perf_counter() - t0) / args.steps
    full, part = res.values()
    print(f"{loaded.model_id} on {runner.device}, {args.tokens}-token document, {args.steps} decode steps "
          "(second round):")
    for label, dt in res.items():
        print(f"  {label:>20}: {dt * 1e3:7.1f} ms/step")
    print(f"  ratio: {full / part:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
