"""The engine: one loop per replica over requests held as state (docs/ARCHITECTURE.md).

``local.py`` (the API a replica calls) -> ``loop.py`` (the thread and the callers' queues) ->
``step.py`` (schedule, one forward, sample, postprocess) -> ``scheduler.py`` (the step plan),
``sampler.py`` (every row's token at once),
``request.py`` (a request's state and its token stream), ``kv_cache.py`` (device KV memory).
"""

from agentctx.serving.engine.base import ContextNotLoadedError, Engine, PageLoader
from agentctx.serving.engine.local import STEP_TOKENS, LocalEngine
from agentctx.serving.engine.request import GenerationCancelled

__all__ = ["Engine", "LocalEngine", "ContextNotLoadedError", "PageLoader", "GenerationCancelled", "STEP_TOKENS"]
