"""Command line: ``agentctx review FILE [FILE ...]``, ``agentctx serve``, ``agentctx prepare-model``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import agentctx

__all__ = ["main", "SAMPLE_CONTRACT"]

SAMPLE_CONTRACT = Path(agentctx.__file__).parent / "samples" / "sample_contract.txt"
log = logging.getLogger("agentctx")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for name in ("ray", "ray.serve", "filelock", "httpx", "urllib3", "sentence_transformers", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _read_document(path: str) -> str:
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"error: document {path!r} does not exist")
    if not p.is_file():
        raise SystemExit(f"error: {path!r} is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SystemExit(f"error: {path!r} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                         "convert it to plain text first") from exc
    if not text.strip():
        raise SystemExit(f"error: document {path!r} is empty")
    return text


def _config(args):
    from agentctx.config import load_config

    cfg = load_config(args.config)
    if getattr(args, "model", None):
        cfg.model.path = args.model
    if getattr(args, "tokenizer", None):
        cfg.model.tokenizer = args.tokenizer
    if getattr(args, "stall_timeout", None) is not None:
        cfg.serve.stall_timeout_s = args.stall_timeout
    if getattr(args, "budget", None) is not None:
        cfg.retrieval = cfg.retrieval.model_copy(update={"budget_fraction": args.budget, "top_k_pages": None})
    return cfg


def cmd_review(args) -> int:
    from agentctx.pipelines.document_review import run_review
    from agentctx.pipelines.report import report_summary_line
    from agentctx.runtime import Runtime

    files = args.file or [str(SAMPLE_CONTRACT)]
    names = [Path(f).name for f in files]
    if len(set(names)) < len(names):  # the report names each document by its file name
        names = [str(Path(f)) for f in files]
    docs = [(name, _read_document(f)) for name, f in zip(names, files, strict=True)]  # all read before any work
    cfg = _config(args)
    kinds = tuple(k.strip() for k in args.clauses.split(",")) if args.clauses else None
    if kinds:  # checked before anything starts
        from agentctx.agents import check_clause_kinds

        try:
            check_clause_kinds(kinds)
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
    with Runtime.start(cfg) as rt:
        report = run_review(rt, docs if len(docs) > 1 else docs[0][1], source=", ".join(names),
                            tenant=args.tenant, dense=args.dense, out_dir=args.out,
                            **({"clause_kinds": kinds} if kinds else {}))
    shown = None
    for c in report.clauses:
        if c.document is not None and c.document != shown:
            shown = c.document
            print(f"document {c.document + 1}: {report.documents[c.document].name}")
        if c.present and c.citation:
            status = "verified" if c.verified else "UNVERIFIED"
            print(f"  {c.kind:16s} {status:10s} [{c.section}] \"{' '.join(c.citation.quote.split())}\"")
        else:
            print(f"  {c.kind:16s} not found  ({c.note or 'no evidence'})")
    for r in report.risks:
        p = r.severity_probs.get(r.model_severity, 0) if r.model_severity else 0
        m = f" (model: {r.model_severity} p={p:.2f})" if r.model_severity else ""
        where = f" [{report.documents[r.document].name}]" if r.document is not None else ""
        print(f"  risk {r.clause_kind:16s} {r.severity:6s} {r.rule}{where}: {r.rationale}{m}")
    for n in report.notes:
        print(f"note: {n}")
    print(report_summary_line(report))
    print(f"report: {Path(args.out) / 'report.html'}")
    return 0 if not report.errors else 2


def cmd_serve(args) -> int:
    from agentctx.entrypoints.http.server import serve_forever

    serve_forever(_config(args))
    return 0


def cmd_prepare_model(args) -> int:
    from agentctx.serving.model_loader import load_tokenizer_dir, resolve_model_dir

    tok = load_tokenizer_dir(args.tokenizer) if args.tokenizer else None  # a bad dir fails before any work
    print(resolve_model_dir(args.model, args.tokenizer))
    if tok is not None:
        print(f"tokenizer: {args.tokenizer} ({len(tok)} tokens)")
    return 0


def _positive(raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{raw!r}: give a positive, finite number of seconds")
    return v


_TOKENIZER_HELP = "local dir whose tokenizer replaces the model's own (e.g. beside a .gguf file)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentctx", description="Many agents over one long document, one KV cache.")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("review", help="review a document: summary, clauses, risks (JSON + HTML)")
    r.add_argument("file", nargs="*", help="UTF-8 text file(s) (default: the bundled sample); several files are "
                                          "one case file: one context, each document reviewed apart")
    r.add_argument("--model", help="local HF checkpoint dir or .gguf file (default: embedded Gemma 3 270M)")
    r.add_argument("--tokenizer", help=_TOKENIZER_HELP)
    r.add_argument("--out", default="out/review", help="output dir for report.json / report.html")
    r.add_argument("--config", help="agentctx YAML config")
    r.add_argument("--tenant", default="default")
    r.add_argument("--dense", action="store_true", help="attend every page (the dense peer)")
    r.add_argument("--budget", type=float, help="attend this fraction of the context (e.g. 0.12)")
    r.add_argument("--clauses", help="comma-separated clause kinds (default: the whole taxonomy)")
    r.add_argument("--stall-timeout", type=_positive, metavar="S",
                   help="fail a model call (the prefill included) only after S seconds without progress "
                        "(default: serve.stall_timeout_s, 600)")
    r.set_defaults(func=cmd_review)

    s = sub.add_parser("serve", help="start the HTTP API (Ray Serve) in the foreground")
    s.add_argument("--config", default=None, help="agentctx YAML config (e.g. deploy/agentctx.yaml)")
    s.add_argument("--model")
    s.add_argument("--tokenizer", help=_TOKENIZER_HELP)
    s.add_argument("--stall-timeout", type=_positive, metavar="S",
                   help="fail a document's prefill or restore only after S seconds without progress")
    s.set_defaults(func=cmd_serve)

    m = sub.add_parser("prepare-model", help="convert the embedded model once (or check a --model dir)")
    m.add_argument("--model")
    m.add_argument("--tokenizer", help=_TOKENIZER_HELP)
    m.set_defaults(func=cmd_prepare_model)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
