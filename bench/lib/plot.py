"""PNG plots of a session-benchmark result (bench_session.json). Skipped when matplotlib is absent.

    python -m bench.lib.plot bench/results/bench_session.json   # re-plot a saved result
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["make_plots"]

HEADLINE = "0.12"


def _series(res: dict, model: str):
    """{peer label: [(tokens, peer dict)]} for one model, estimated naive points flagged."""
    out: dict[str, list] = {}
    m = res["models"][model]
    for key in sorted(m["sizes"], key=int):
        s = m["sizes"][key]
        peers = s.get("peers") or {}
        n = int(s.get("tokens", key))
        for name in ("naive", "dense"):
            p = peers.get(name)
            if isinstance(p, dict) and "ttft_mean_s" in p:
                label = name + (" (est.)" if p.get("estimated") else "")
                out.setdefault(label, []).append((n, p))
        ag = peers.get("agentctx")
        if isinstance(ag, dict):
            for b, p in ag.items():
                if isinstance(p, dict) and "ttft_mean_s" in p:
                    out.setdefault(f"agentctx {float(b):.0%}", []).append((n, p))
    return out


def make_plots(res: dict, out_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["matplotlib not installed: no plots"]
    out_dir = Path(out_dir)
    written = []
    bw = res["rates"]["copy_bandwidth_Bps"]
    def inv(key):
        return lambda f: (1.0 / f[key]) if f.get(key) else None

    # (title, value of a peer point, floor of a peer point or None)
    metrics = [
        ("TTFT per query (s); dotted: floor", lambda p: p["ttft_mean_s"],
         lambda p, label: p.get("floors", {}).get("naive_ttft_s" if label.startswith("naive") else "ttft_s")),
        ("decode tokens/s; dotted: floor", lambda p: p.get("decode_tok_s"),
         lambda p, label: inv("decode_step_s")(p.get("floors", {}))),
        ("prefill tokens/s (naive: per query); dotted: floor", None, None),
        ("session wall time (s)", lambda p: p.get("session_s"), None),
        ("peak GPU memory (GiB)", lambda p: p.get("peak_gib"), None),
    ]
    for model in res["models"]:
        series = _series(res, model)
        if not series:
            continue
        m = res["models"][model]
        fig, grid = plt.subplots(2, 3, figsize=(16, 9))
        axes = list(grid.flat)
        for ax, (title, get, floor) in zip(axes, metrics):
            if get is None:  # prefill throughput: shared prefill (dense/agentctx) and naive per query
                pts_s, pts_n, fl = [], [], []
                for key in sorted(m["sizes"], key=int):
                    s = m["sizes"][key]
                    n = int(s.get("tokens", key))
                    if s.get("prefill_tok_s"):
                        pts_s.append((n, s["prefill_tok_s"]))
                        fl.append((n, s.get("floors_dense", {}).get("prefill_tok_s")))
                    nv = (s.get("peers") or {}).get("naive")
                    if isinstance(nv, dict) and nv.get("ttft_mean_s") and not nv.get("estimated"):
                        pts_n.append((n, (n + s.get("question_tokens_mean", 0)) / nv["ttft_mean_s"]))
                for pts, label in ((pts_s, "shared prefill (ours)"), (pts_n, "naive (transformers)")):
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", ms=4, label=label)
                fl = [(x, y) for x, y in fl if y]
                if fl:
                    ax.plot([x for x, _ in fl], [y for _, y in fl], ":", color="gray", label="floor")
                ax.legend(fontsize=7)
            else:
                for label, pts in series.items():
                    xs = [n for n, p in pts if get(p)]
                    ys = [get(p) for n, p in pts if get(p)]
                    if xs:
                        line = ax.plot(xs, ys, "--o" if "est" in label else "-o", label=label, ms=4)[0]
                        if floor is not None:
                            f = [(n, floor(p, label)) for n, p in pts if floor(p, label)]
                            if f:
                                ax.plot([x for x, _ in f], [y for _, y in f], ":", lw=1, color=line.get_color())
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("context tokens")
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
        # decode attention kernel vs bandwidth floor
        ax = axes[5]
        kv = m["shape"]["kv_bytes_per_token"]
        for label, pts in series.items():
            if not label.startswith(("dense", "agentctx")):
                continue
            xs, ys, fs = [], [], []
            for n, p in pts:
                k = p.get("kernel") or {}
                if k.get("device_s"):
                    att = k.get("attended_tokens", n)
                    xs.append(n)
                    ys.append(k["device_s"] * 1e6)
                    fs.append(att * kv / bw * 1e6)
            if xs:
                line = ax.plot(xs, ys, "-o", label=label, ms=4)[0]
                ax.plot(xs, fs, ":", color=line.get_color(), lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context tokens")
        ax.set_title("decode attention kernel us/token (dotted: floor)")
        ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{model} ({m.get('weights', '')}; {m.get('selection', '')})")
        fig.tight_layout()
        path = out_dir / f"session_{model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/bench_session.json")
    print(make_plots(json.loads(src.read_text()), src.parent))
