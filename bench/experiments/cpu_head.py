"""The output head on CPU: lm_head(hidden) vs weight @ hidden.T (`_cpu_head` in serving/runner/output_head.py), side by
side in one process on the real Gemma 3 270M, alone and inside decode steps (1 and 4 rows).

    python bench/experiments/cpu_head.py [--tokens 4096] [--reps 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402


def timed(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.runner.batch_forward import Row, run_rows
    from agentctx.serving.runner.model_runner import ModelRunner
    from agentctx.serving.runner.output_head import _cpu_head

    loaded = load_model(args.model, device="cpu")
    runner = ModelRunner(loaded, page_size=256, prefill_chunk_tokens=1024)
    head = loaded.model.lm_head
    print(f"{loaded.model_id} on cpu, head {tuple(head.weight.shape)} fp32, "
          f"{torch.get_num_threads()} threads")
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for m in (1, 2, 4, 8):
            h = torch.randn(m, head.weight.shape[1], generator=g)
            a = timed(lambda: head(h), args.reps)
            b = timed(lambda: _cpu_head(h, head.weight, head.bias), args.reps)
            diff = (head(h) - _cpu_head(h, head.weight, head.bias)).abs().max().item()
            print(f"  head alone, {m} row(s): lm_head {a * 1e3:6.1f} ms  weight@hidden.T {b * 1e3:6.1f} ms  "
                  f"({a / b:.2f}x)  max|diff| {diff:.1e}")
        ids = torch.randint(10, 20000, (args.tokens,), generator=g).tolist()
        doc = runner.prefill(ids, progress=False)
        pages = [0, doc.num_pages - 1]
        for rows in (1, 4):
            res = {}
            for _ in range(2):  # interleaved; the second round counts
                for left in (False, True):
                    runner.cpu_head_left = left
                    tails = [runner.new_tail(doc) for _ in range(rows)]
                    for t in tails:
                        runner.extend(doc, t, ids[:12], pages)
                    steps = iter(range(10_000))

                    def step():
                        i = next(steps)
                        if rows == 1:
                            runner.extend(doc, tails[0], [ids[i]], pages)
                        else:
                            run_rows(runner, [Row(doc, t, [ids[i + j]], tuple(pages)) for j, t in enumerate(tails)])

                    res[left] = timed(step, args.reps)
            print(f"  decode forward, {rows} row(s): lm_head {res[False] * 1e3:6.1f} ms  "
                  f"weight@hidden.T {res[True] * 1e3:6.1f} ms  ({res[False] / res[True]:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
