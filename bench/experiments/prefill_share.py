"""A generation while another document is prefilled on the same replica (CPU, real Gemma 3 270M).

    python bench/experiments/prefill_share.py [--repeats 2]

A 24-token greedy generation over a 4K-token contract alone, then started 0.2 s before an
~7.5K-token document's prefill on the same engine. Scheduler policies, alternating in one process
(each with the generation's longest wait between two pieces of streamed text): "whole chunks 1:1"
(the default until 2026-12-07: a prefill chunk of 1,024 tokens runs whole, then the steps get as
long as it took), "whole chunks 2:1" (twice as long; tried 2026-12-07, no measurable change) and
"layer breaks 2:1" (the default: the steps owed run between the chunk's layers,
serving/runner/layer_breaks.py, two seconds of steps per second of prefill). A policy of prefill
chunks sized to ~4 decode steps (256 tokens here) beside running requests was tried: the same
generation time and longest wait within noise, the prefill up to 7% slower; not kept.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from agentctx.serving.engine import LocalEngine
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.types import GenerateRequest
    from tests.fixtures.contracts import generate_contract

    eng = LocalEngine(load_model(None), decode_batch=8)
    eng.prefill("doc", eng.tokenize_document(generate_contract(4096, seed=0).text), progress=False)
    big = eng.tokenize_document(generate_contract(8192, seed=3).text)
    req = GenerateRequest("doc", "\nQuestion: Which law governs this agreement?\nAnswer:", pages=(2, 9),
                          max_new_tokens=24)
    eng.generate(req)
    sched = eng.loop

    def policy(name: str) -> None:
        sched.step_share = 1.0 if name.endswith("1:1") else 2.0
        eng.runner.layer_breaks = name.startswith("layer breaks")

    gaps: list[float] = []

    def timed() -> float:
        """The generation's time; its longest wait between two pieces of text goes to gaps."""
        stamps = [time.perf_counter()]
        eng.generate(req, on_text=lambda _: stamps.append(time.perf_counter()))
        stamps.append(time.perf_counter())
        gaps.append(max(b - a for a, b in zip(stamps, stamps[1:])))
        return stamps[-1] - stamps[0]

    names = ("whole chunks 1:1", "whole chunks 2:1", "layer breaks 2:1")
    for rep in range(args.repeats):
        for name in names:
            policy(name)
            alone = timed()
            res: dict[str, float] = {}
            th = threading.Thread(target=lambda: res.setdefault("gen", timed()))
            th.start()
            time.sleep(0.2)
            t0 = time.perf_counter()
            eng.prefill(f"big-{rep}-{name}", big, progress=False)
            pf = time.perf_counter() - t0
            th.join()
            print(f"{name:30s} generation alone {alone:5.2f} s, during the {len(big.token_ids)}-token prefill "
                  f"{res['gen']:5.2f} s ({res['gen'] / alone:4.1f}x), longest wait for text {gaps[-1]:4.2f} s; "
                  f"prefill {pf:5.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
