"""An on/off switch for one fusion, scoped to the current thread or task.

Each fusion (fused norms, fused RoPE, merged projections) rewires modules of a model that
transformers' own forward also runs; the switch is what keeps the fused code inside our
runner's forwards only. A ``contextvars`` variable makes concurrent forwards in other
threads or tasks see their own setting.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["FusionSwitch"]


class FusionSwitch:
    def __init__(self, name: str):
        self._var: contextvars.ContextVar[bool] = contextvars.ContextVar(f"agentctx_{name}", default=False)

    def on(self) -> bool:
        return self._var.get()

    @contextlib.contextmanager
    def active(self, on: bool = True) -> Iterator[None]:
        """Within this block (this thread / task only), the fusion is ``on``."""
        token = self._var.set(on)
        try:
            yield
        finally:
            self._var.reset(token)
