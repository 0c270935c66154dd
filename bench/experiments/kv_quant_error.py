"""Error of each KV scale granularity, fp8 and int8, on CPU (float32 reference attention).

    python bench/experiments/kv_quant_error.py            # ~10 s on 2 cores
    python bench/experiments/kv_quant_error.py --markdown # the table of docs/KERNELS.md

For Gemma 3 270M heads (Hq 4, Hkv 1, D 256) and Llama 3 8B heads (Hq 32, Hkv 8, D 128): 4K tokens
in 256-token pages, Gaussian K and V, and in K one channel per head 20x the others (the outlier
channel real models' keys have; kv_store/quant.py). Quantises K and V with
``kernels.kv_quant.quantize_pages`` at each granularity and reports the relative RMS error
``||x' - x|| / ||x||`` of K, of V and of the attention output of 4 Gaussian query tokens over all
pages (``attend_selected_reference``, float32) against the unquantised pages. The bf16 row casts
K and V to bf16 instead: the error a plain bf16 cache already has. Imports torch only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agentctx.kernels.kv_quant import DEFAULT_GRANULARITY, GRANULARITIES, quantize_pages  # noqa: E402
from agentctx.kernels.reference import attend_selected_reference  # noqa: E402

SHAPES = {"gemma3-270m": dict(Hq=4, Hkv=1, D=256), "llama3-8b": dict(Hq=32, Hkv=8, D=128)}


def make_kv(T: int, P: int, Hkv: int, D: int, outlier: float, seed: int):
    """(S, P, Hkv, D) float32 K and V; K's channel c_h of head h is ``outlier`` times the rest."""
    gen = torch.Generator().manual_seed(seed)
    S = T // P
    k = torch.randn(S, P, Hkv, D, generator=gen)
    v = torch.randn(S, P, Hkv, D, generator=gen)
    chans = torch.randint(0, D, (Hkv,), generator=gen)
    k[:, :, torch.arange(Hkv), chans] *= outlier
    return k, v


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def attend_all(q, k, v):
    S, P = k.shape[:2]
    bt = torch.arange(S, dtype=torch.int32)[None]
    nb = torch.tensor([S], dtype=torch.int32)
    lens = torch.full((S,), P, dtype=torch.int32)
    return attend_selected_reference(q, k, v, bt, nb, lens, q.shape[-1] ** -0.5)[0]


def measure(T: int = 4096, P: int = 256, Tq: int = 4, outlier: float = 20.0, seed: int = 0) -> list[dict]:
    """One row per (dtype, granularity of K, granularity of V) and shape."""
    rows = []
    for name, s in SHAPES.items():
        k, v = make_kv(T, P, s["Hkv"], s["D"], outlier, seed)
        q = torch.randn(1, Tq, s["Hq"], s["D"], generator=torch.Generator().manual_seed(seed + 1))
        exact = attend_all(q, k, v)
        kb, vb = k.bfloat16().float(), v.bfloat16().float()
        rows.append(dict(shape=name, dtype="bf16", kg="-", vg="-", k=rel(kb, k), v=rel(vb, v),
                         out=rel(attend_all(q, kb, vb), exact)))
        for dtype in ("fp8", "int8"):
            deq = {}
            for g in GRANULARITIES:
                deq[("k", g)] = quantize_pages(k, dtype, g).dequantize()
                deq[("v", g)] = quantize_pages(v, dtype, g).dequantize()
            qd = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}[dtype]
            default = (DEFAULT_GRANULARITY[(qd, "k")], DEFAULT_GRANULARITY[(qd, "v")])
            pairs = [(g, g) for g in GRANULARITIES] + [default]
            for kg, vg in dict.fromkeys(pairs):  # keeps order, drops a default already listed
                kd, vd = deq[("k", kg)], deq[("v", vg)]
                rows.append(dict(shape=name, dtype=dtype, kg=kg, vg=vg, k=rel(kd, k), v=rel(vd, v),
                                 out=rel(attend_all(q, kd, vd), exact), default=(kg, vg) == default))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--outlier", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    rows = measure(args.tokens, outlier=args.outlier, seed=args.seed)
    by = {}
    for r in rows:
        by.setdefault((r["dtype"], r["kg"], r["vg"], r.get("default", False)), {})[r["shape"]] = r
    names = list(SHAPES)
    print("| dtype | K scales | V scales | " + " | ".join(f"{n} {x}" for n in names for x in ("K", "V", "out"))
          + " |")
    print("|---|---|---|" + "---:|" * (3 * len(names)))
    for (dtype, kg, vg, default), per in by.items():
        cells = " | ".join(f"{100 * per[n][x]:.2f}%" for n in names for x in ("k", "v", "out"))
        mark = " (default)" if default else ""
        print(f"| {dtype}{mark} | {kg} | {vg} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
