"""Does torch.compile of the RMSNorm modules (serving.fusion) change a forward? CUDA check.

    python bench/check_fusion.py

Compares each compiled norm with its eager forward on the shapes a query forward
uses, then the logits of eager/static/graph query forwards with and without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def main() -> int:
    from bench.bench_session import build_model
    from serving.fusion import compile_norms
    from serving.model_runner import ModelRunner

    dev = torch.device("cuda")
    loaded, _ = build_model("gemma3-270m-random", dev, seed=0)
    model = loaded.model
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    for m in norms[:4]:
        d = m.weight.shape[0]
        for shape in ((1, 24, d), (1, 32, d), (1, 1, d), (1, 32, 4, d), (1, 1, 1, d)):
            if shape[-1] == d:
                cases.append((m, torch.randn(*shape, generator=g, device=dev, dtype=torch.bfloat16)))
    ref = [m(x) for m, x in cases]
    runner = ModelRunner(loaded, page_size=256, prefill_chunk_tokens=4096)
    ids = torch.randint(10, 200000, (8192,), generator=torch.Generator().manual_seed(0)).tolist()
    doc = runner.prefill(ids, progress=False)
    pages = [0, 5, 9, 31]

    def logits_by_mode():
        out = {}
        for mode in ("eager", "static", "graph"):
            runner.query_mode = mode
            for _ in range(2):
                tail = runner.new_tail(doc)
                lg = runner.extend(doc, tail, ids[:24], pages)
                lg2 = runner.extend(doc, tail, [int(lg.argmax())], pages)
            out[mode] = (lg, lg2)
        return out

    before = logits_by_mode()
    compile_norms(model)
    got = [m(x) for m, x in cases]
    for (m, x), a, b in zip(cases, ref, got):
        print(f"norm d={m.weight.shape[0]} x{tuple(x.shape)}: max |compiled - eager| = {(a - b).abs().max().item():.3g}")
    after = logits_by_mode()
    for mode in before:
        for i in range(2):
            a, b = before[mode][i], after[mode][i]
            print(f"{mode} forward {i}: max |logit diff| compiled vs not = {(a - b).abs().max().item():.3g}, "
                  f"argmax {int(a.argmax())} vs {int(b.argmax())}; vs eager-uncompiled "
                  f"{(b - before['eager'][i]).abs().max().item():.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
