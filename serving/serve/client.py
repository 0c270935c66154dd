"""Clients for a model replica: in-process or through a Ray Serve handle, one interface.

Agents, the context loader and the HTTP ingress talk to replicas only through
these, so the same agent code runs in a unit test (in-process replica) and on a
cluster (Serve handle, picklable into Ray actors).
"""

from __future__ import annotations

from typing import Protocol

from agentctx.serving.serve.progress import ProgressCallback, chunk_reporter, follow
from agentctx.serving.types import GenerateRequest, GenerateResult, PrefillResult, ScoreRequest, TokenizedDoc

__all__ = ["ReplicaAPI", "LocalReplicaClient", "ServeReplicaClient"]


class ReplicaAPI(Protocol):
    def info(self) -> dict: ...
    def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc: ...
    def restore_context(self, context_id: str, tenant: str, text: str | None = None): ...
    def prefill_context(self, context_id: str, tenant: str, doc: TokenizedDoc, extra: dict | None = None
                        ) -> PrefillResult: ...
    def generate(self, req: GenerateRequest) -> GenerateResult: ...
    def score(self, req: ScoreRequest) -> list[float]: ...


class LocalReplicaClient:
    """Calls a ModelReplica in this process."""

    def __init__(self, replica):
        self.replica = replica

    def info(self) -> dict:
        return self.replica.info()

    def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc:
        return self.replica.tokenize_document(text, allow_empty)

    def restore_context(self, context_id: str, tenant: str, text: str | None = None,
                        on_progress: ProgressCallback | None = None):
        return self.replica.restore_context(context_id, tenant, text, _reporter(on_progress))

    def prefill_context(self, context_id, tenant, doc, extra=None, on_progress: ProgressCallback | None = None
                        ) -> PrefillResult:
        return self.replica.prefill_context(context_id, tenant, doc, progress=False, extra=extra,
                                            on_chunk=_reporter(on_progress))

    def generate(self, req: GenerateRequest) -> GenerateResult:
        return self.replica.generate(req)

    def score(self, req: ScoreRequest) -> list[float]:
        return self.replica.score(req)

    def stream(self, req: GenerateRequest):
        return self.replica.stream(req)


def _reporter(on_progress: ProgressCallback | None):
    return None if on_progress is None else chunk_reporter(on_progress)


class ServeReplicaClient:
    """Calls the ModelReplica deployment through a Serve DeploymentHandle (picklable).

    Requests carry the context id as the multiplexed model id, so Serve routes a
    context's requests to a replica that already holds its pages (context
    affinity) and falls back to the least loaded replica otherwise.

    Blocking methods (agents, the runtime) wait at most ``timeout_s``, except a document's prefill
    and a context's restore: those stream their progress and fail only when none came for
    ``stall_s`` (``serving/serve/progress.py``), however long the document. The ``a*`` methods are
    awaitable Serve responses for an event loop (the HTTP ingress), which sets its own deadlines.
    Every call names its deployment method in code, so a reader (and a type checker) can follow it.
    """

    def __init__(self, handle, timeout_s: float = 600.0, stall_s: float = 600.0):
        self.handle = handle
        self.timeout_s = timeout_s
        self.stall_s = stall_s

    def _h(self, context_id: str | None = None, stream: bool = False):
        h = self.handle
        if context_id or stream:
            h = h.options(**({"multiplexed_model_id": context_id} if context_id else {}),
                          **({"stream": True} if stream else {}))
        return h

    def _wait(self, resp):
        return resp.result(timeout_s=self.timeout_s)

    # ------------------------------------------------------------------ blocking
    def info(self) -> dict:
        return self._wait(self._h().info.remote())

    def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc:
        return self._wait(self._h().tokenize_document.remote(text, allow_empty))

    def restore_context(self, context_id: str, tenant: str, text: str | None = None,
                        on_progress: ProgressCallback | None = None):
        """Put back a stored context's missing pages and blobs: a ``RestoreResult``."""
        stream = self._h(context_id, stream=True).restore_context_events.remote(context_id, tenant, text)
        return follow(stream, self.stall_s, on_progress, f"restore of {context_id}")

    def prefill_context(self, context_id, tenant, doc, extra=None, on_progress: ProgressCallback | None = None
                        ) -> PrefillResult:
        stream = self._h(context_id, stream=True).prefill_context_events.remote(context_id, tenant, doc, extra)
        return follow(stream, self.stall_s, on_progress, f"prefill of {context_id} ({len(doc.token_ids)} tokens)")

    def generate(self, req: GenerateRequest) -> GenerateResult:
        return self._wait(self._h(req.context_id).generate.remote(req))

    def score(self, req: ScoreRequest) -> list[float]:
        return self._wait(self._h(req.context_id).score.remote(req))

    def stream(self, req: GenerateRequest):
        return self._h(req.context_id, stream=True).stream.remote(req)

    # ------------------------------------------------------------------ awaitable (event loops)
    def ainfo(self):
        return self._h().info.remote()

    def arender_chat(self, messages: list[dict]):
        return self._h().render_chat.remote(messages)

    def adrop_context(self, context_id: str):
        return self._h(context_id).drop_context.remote(context_id)

    def agenerate(self, req: GenerateRequest):
        return self._h(req.context_id).generate.remote(req)

    def astream_events(self, req: GenerateRequest):
        """An async generator of ``("delta", text)``..., ``("result", GenerateResult)``."""
        return self._h(req.context_id, stream=True).stream_events.remote(req)
