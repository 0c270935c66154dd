"""Document-review session benchmark: naive re-prefill vs dense reuse vs agentctx page selection.

A session is ``--agents`` agents x ``--questions`` questions each over one
document of N tokens. Three peers run the same model on the same inputs
(see :mod:`bench.lib.peers`): naive (transformers, re-prefill per query), dense
reuse (one shared prefill, every query attends to every page) and agentctx
(one shared prefill, each query attends to the pages a selector picks, at
each ``--budgets`` fraction). Per peer and size it reports prefill tokens/s,
TTFT per query, decode tokens/s, peak GPU memory, session wall time, KV bytes
per token, attended share of the context, and agreement of greedy tokens
with dense reuse; beside each figure the physical floor from measured copy
bandwidth and matmul rate (:mod:`bench.lib.physics`). It also records the largest
context each peer reached before running out of memory and checks the
targets listed at the end of the report.

Models (bench/lib/models.py):
  gemma3-270m-random, llama3-8b-random  real architectures, random bf16 weights built on the GPU
                                        (the GPU machine has no network and no weights)
  real-gemma                            the converted Gemma 3 270M checkpoint (CPU, fp32)
  tiny-gemma3, tiny-llama, tiny-qwen3   tiny configs from tests/factories.py (smoke tests)

``--model NAME[:SIZES]`` may be repeated; SIZES is a comma list like 8k,32k,1m.

GPU (one H200, < 9 minutes):
    python bench/bench_session.py --model gemma3-270m-random --model llama3-8b-random
CPU, real weights:
    python bench/bench_session.py --model real-gemma:8k

Outputs go to $OUT if set, else bench/results/ (override with --out):
bench_session.json (everything, per query), bench_session.md (tables) and PNG plots.
The code: this file parses the arguments and runs the models in turn; bench/lib/session.py runs
one model size by size, bench/lib/session_plan.py fits that into --budget-s, and
bench/lib/session_report.py writes the report.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Runnable as `python bench/bench_session.py` as well as `python -m bench.bench_session`.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import torch  # noqa: E402

from bench.lib import physics  # noqa: E402
from bench.lib.memory import free  # noqa: E402
from bench.lib.models import DEFAULT_SIZES  # noqa: E402
from bench.lib.peers import is_oom  # noqa: E402
from bench.lib.report import T0, log, parse_size  # noqa: E402
from bench.lib.session import ModelBench  # noqa: E402
from bench.lib.session_plan import BudgetExceeded, Clock  # noqa: E402
from bench.lib.session_report import markdown, write_outputs  # noqa: E402

RANDOM_NOTE = (
    "GPU runs use RANDOM weights (real architectures built from config, std 0.02, bf16, random token ids): "
    "the GPU machine has no network and no weights. Speed/memory figures are those of the real architectures; "
    "answer quality is only meaningful for real-gemma."
)


# ============================================================================ args
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None,
                    help="NAME[:SIZES]; repeatable. Default: both random GPU models on CUDA, real-gemma:8k on CPU")
    ap.add_argument("--sizes", default=None, help="sizes for every --model without its own (e.g. 8k,32k)")
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--questions", type=int, default=3, help="questions per agent")
    ap.add_argument("--decode-tokens", type=int, default=None, help="greedy tokens per answer (16 GPU, 24 real)")
    ap.add_argument("--question-tokens", type=int, default=24, help="question length for random-id workloads")
    ap.add_argument("--budgets", default="0.05,0.12,0.25", help="agentctx selection budgets (fractions)")
    ap.add_argument("--page-size", type=int, default=256)
    ap.add_argument("--prefill-chunk", type=int, default=None, help="shared-prefill chunk (4096 GPU, 1024 CPU)")
    ap.add_argument("--naive-chunk", type=int, default=None,
                    help="naive prefill chunk (default = --prefill-chunk; 0 = one shot)")
    ap.add_argument("--naive-max-query-s", type=float, default=60.0,
                    help="no naive run at sizes where one query takes (or is predicted to take) longer")
    ap.add_argument("--naive-size-budget-s", type=float, default=None,
                    help="naive seconds per size before the rest of its queries are extrapolated (20 GPU, 90 CPU)")
    ap.add_argument("--sink-pages", type=int, default=1)
    ap.add_argument("--recent-tokens", type=int, default=256)
    ap.add_argument("--selection", choices=("auto", "oracle", "retrieval"), default="auto",
                    help="auto: retrieval for real-weight runs when `retrieval` imports, else oracle+random")
    ap.add_argument("--kernel-impl", default="auto", help="attend_selected impl: auto|triton|torch|flash")
    ap.add_argument("--kernel-reps", type=int, default=20)
    ap.add_argument("--kv-dtype", default="auto", choices=("auto", "bf16", "fp8_e4m3", "int8"),
                    help="the document's pages on the device (model.kv_dtype): quantised pages are read by "
                         "attend_selected_quant, in the kernel timing too")
    ap.add_argument("--query-mode", default="auto", choices=("auto", "eager", "static", "graph"),
                    help="query forwards: auto = CUDA graphs on CUDA, eager on CPU (serving.runner.static_query)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting new work after this many seconds (470 on CUDA, 7200 on CPU); "
                         "a SIGALRM hard stop follows 30 s later (results so far are still written)")
    ap.add_argument("--no-alarm", action="store_true", help="no SIGALRM hard stop at --budget-s + 30 s")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-plan", action="store_true",
                    help="run every size and budget without the time prediction (e.g. one large size alone, "
                         "where the prediction has no measured prefill to fit); the hard stop still applies")
    ap.add_argument("--no-probe", action="store_true", help="skip the KV allocation capacity probe")
    ap.add_argument("--device", default=None)
    ap.add_argument("--weights", default=None,
                    help="real-gemma only: a checkpoint dir or .gguf file instead of the embedded model")
    ap.add_argument("--tokenizer", default=None,
                    help="real-gemma only: a dir whose tokenizer replaces the weights' own (with a .gguf on a "
                         "machine whose transformers rebuilds its tokenizer wrongly)")
    ap.add_argument("--fused-proj", default="auto", choices=("auto", "on", "off"),
                    help="merged q/k/v and gate/up products (serving/fusions/proj.py); off = for an A/B run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output dir (default $OUT, else bench/results)")
    return ap.parse_args(argv)


# ============================================================================ main
def _defaults(args: argparse.Namespace, device: torch.device) -> None:
    cuda = device.type == "cuda"
    if args.prefill_chunk is None:
        args.prefill_chunk = 4096 if cuda else 1024
    if args.prefill_chunk % args.page_size:
        args.prefill_chunk = max(1, args.prefill_chunk // args.page_size) * args.page_size
    if args.naive_chunk is None:
        args.naive_chunk = args.prefill_chunk
    if args.naive_size_budget_s is None:
        args.naive_size_budget_s = 20.0 if cuda else 90.0
    if not args.model:
        args.model = ["gemma3-270m-random", "llama3-8b-random"] if cuda else ["real-gemma"]
    if args.budget_s is None:
        args.budget_s = 470.0 if cuda else 7200.0


def run_suite(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    _defaults(args, device)
    out_dir = Path(args.out or os.environ.get("OUT") or (_ROOT / "bench" / "results"))
    clock = Clock(args.budget_s)
    budgets = [float(x) for x in args.budgets.split(",") if x.strip()]
    specs = []
    for m in args.model:
        name, _, sizes = m.partition(":")
        sizes = sizes or args.sizes or DEFAULT_SIZES.get(name)
        if name not in DEFAULT_SIZES:
            raise SystemExit(f"unknown --model {name!r}; known: {', '.join(DEFAULT_SIZES)}")
        if name == "llama3-8b-random" and device.type != "cuda":
            raise SystemExit("llama3-8b-random needs a CUDA GPU")
        specs.append((name, sorted(parse_size(s) for s in sizes.split(","))))

    import transformers

    res: dict[str, Any] = {
        "meta": {"argv": sys.argv if argv is None else argv, "python": platform.python_version(),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "cuda": torch.version.cuda, "started": time.strftime("%Y-%m-%d %H:%M:%S")},
        "args": vars(args),
        "models": {},
        "notes": [],
    }
    if device.type == "cuda":
        try:
            import triton

            res["meta"]["triton"] = triton.__version__
        except ImportError:
            res["meta"]["triton"] = None
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    log(f"measuring {device} rates ...")
    rates = physics.measure_rates(device, dtype)
    res["rates"] = rates.to_dict()
    log(f"{rates.device_name}: copy {rates.copy_bandwidth_Bps / 1e9:.0f} GB/s, "
        f"matmul {rates.matmul_flops / 1e12:.1f} TFLOP/s")
    if any(name not in ("real-gemma",) for name, _ in specs):
        res["notes"].append(RANDOM_NOTE if device.type == "cuda" else
                            "Runs marked * use random weights (architecture only).")

    old_handler = None
    if not args.no_alarm and hasattr(signal, "SIGALRM"):
        def _alarm(signum, frame):
            raise BudgetExceeded(f"hard stop at {args.budget_s + 30:.0f}s")
        old_handler = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, int(args.budget_s + 30 - (time.perf_counter() - T0))))
    try:
        for name, sizes in specs:
            if clock.remaining() < 20:
                res["notes"].append(f"{name}: not run (time budget).")
                continue
            mb = None
            try:
                mb = ModelBench(name, sizes, args, device, rates, clock)
                res["models"][name] = mb.result
                sel_note = f"{name}: agentctx pages by {mb.result['selection']}."
                res["notes"].append(sel_note)
                mb.warmup()
                for n in sizes:
                    mb.result["sizes"][str(n)] = mb.run_size(n, budgets)
                    write_outputs(res, out_dir, plots=False)
                mb.result["capacity"] = mb.probe_capacity()
            except BudgetExceeded as exc:
                res["notes"].append(f"{name}: stopped by {exc}; later work not run.")
                log(str(exc))
                raise
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc):
                    raise
                res["notes"].append(f"{name}: OOM outside a measured phase: {str(exc).splitlines()[0][:160]}")
            finally:
                if mb is not None:
                    mb.close()
                free(device)
    except BudgetExceeded:
        pass
    finally:
        if old_handler is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old_handler)
    res["meta"]["wall_s"] = clock.elapsed()
    write_outputs(res, out_dir, plots=True)
    md = markdown(res)
    print("\n" + md, flush=True)
    pngs = [p for p in res.get("plots", []) if str(p).endswith(".png")]
    log(f"wrote {out_dir}/bench_session.json, bench_session.md" + (f", {len(pngs)} PNG plots" if pngs
                                                                   else f" ({'; '.join(res.get('plots', []))})"))
    return res


def main(argv: list[str] | None = None) -> int:
    run_suite(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
