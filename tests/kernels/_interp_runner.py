"""Run the Triton kernels under Triton's CPU interpreter and print one JSON result line.

Used by test_triton_interpret.py in a subprocess, because TRITON_INTERPRET must
be set before kernels.triton_attend is imported (Triton chooses interpreter vs
compiler at decoration time) and must not leak into GPU tests of the parent.

Usage: TRITON_INTERPRET=1 python -m tests.kernels._interp_runner [quant | union_quant]
        (no argument: the cases of test_triton_interpret.py; "quant": those of test_attend_quant.py;
        "union_quant": those of test_union_quant.py)
Output: {"case-id": "ok" | "<error text>", ...}
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set", file=sys.stderr)
        return 2
    from agentctx.kernels import (  # noqa: F401  (decorated under the interpreter)
        triton_act_mul,
        triton_add_norm,
        triton_attend,
        triton_rmsnorm,
        triton_slot_write,
        triton_tail,
        triton_union,
    )

    if sys.argv[1:] == ["quant"]:
        from ._quant_cases import quant_cases, run_quant_case

        return _run([(f"quant-{name}", run_quant_case, spec) for name, spec in quant_cases().items()])
    if sys.argv[1:] == ["union_quant"]:
        from ._union_quant_cases import run_union_quant_case, union_quant_cases

        return _run([(name, run_union_quant_case, spec) for name, spec in union_quant_cases().items()])

    from ._rmsnorm_cases import rmsnorm_cases, run_rmsnorm_case
    from ._step_cases import (
        act_mul_cases,
        add_norm_cases,
        run_act_mul_case,
        run_add_norm_case,
        run_slot_write_case,
        slot_write_cases,
    )
    from ._tail_cases import run_tail_case, tail_cases
    from ._triton_grid import interpreter_cases, run_case
    from ._union_cases import run_union_case, union_cases

    checks = [(name, run_case, spec) for name, spec in interpreter_cases().items()]
    checks += [(f"rmsnorm-{name}", run_rmsnorm_case, spec) for name, spec in rmsnorm_cases().items()]
    checks += [(f"tail-{name}", run_tail_case, spec) for name, spec in tail_cases().items()]
    checks += [(f"union-{name}", run_union_case, spec) for name, spec in union_cases().items()]
    checks += [(f"act_mul-{name}", run_act_mul_case, spec) for name, spec in act_mul_cases().items()]
    checks += [(f"slot_write-{name}", run_slot_write_case, spec) for name, spec in slot_write_cases().items()]
    checks += [(f"add_norm-{name}", run_add_norm_case, spec) for name, spec in add_norm_cases().items()]
    return _run(checks)


def _run(checks) -> int:
    results = {}
    for name, check, spec in checks:
        try:
            check(spec, device="cpu")
            results[name] = "ok"
        except Exception:  # report every failure, do not stop at the first
            results[name] = traceback.format_exc(limit=4)[-3000:]
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
