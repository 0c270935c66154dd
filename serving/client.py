"""Clients for a model replica: in-process or through a Ray Serve handle, one interface.

Agents, the context loader and the HTTP ingress talk to replicas only through
these, so the same agent code runs in a unit test (in-process replica) and on a
cluster (Serve handle, picklable into Ray actors).
"""

from __future__ import annotations

from typing import Protocol

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

    def restore_context(self, context_id: str, tenant: str, text: str | None = None):
        return self.replica.restore_context(context_id, tenant, text)

    def prefill_context(self, context_id, tenant, doc, extra=None) -> PrefillResult:
        return self.replica.prefill_context(context_id, tenant, doc, extra=extra)

    def generate(self, req: GenerateRequest) -> GenerateResult:
        return self.replica.generate(req)

    def score(self, req: ScoreRequest) -> list[float]:
        return self.replica.score(req)

    def stream(self, req: GenerateRequest):
        return self.replica.stream(req)


class ServeReplicaClient:
    """Calls the ModelReplica deployment through a Serve DeploymentHandle (picklable).

    Requests carry the context id as the multiplexed model id, so Serve routes a
    context's requests to a replica that already holds its pages (context
    affinity) and falls back to the least loaded replica otherwise.
    """

    def __init__(self, handle, timeout_s: float = 600.0):
        self.handle = handle
        self.timeout_s = timeout_s

    def _call(self, method: str, *args, context_id: str | None = None, **kwargs):
        h = self.handle
        if context_id:
            h = h.options(multiplexed_model_id=context_id)
        return getattr(h, method).remote(*args, **kwargs).result(timeout_s=self.timeout_s)

    def info(self) -> dict:
        return self._call("info")

    def tokenize_document(self, text: str, allow_empty: bool = False) -> TokenizedDoc:
        return self._call("tokenize_document", text, allow_empty)

    def restore_context(self, context_id: str, tenant: str, text: str | None = None):
        """Put back a stored context's missing pages and blobs: a ``RestoreResult``."""
        return self._call("restore_context", context_id, tenant, text, context_id=context_id)

    def prefill_context(self, context_id, tenant, doc, extra=None) -> PrefillResult:
        return self._call("prefill_context", context_id, tenant, doc, extra=extra, context_id=context_id)

    def generate(self, req: GenerateRequest) -> GenerateResult:
        return self._call("generate", req, context_id=req.context_id)

    def score(self, req: ScoreRequest) -> list[float]:
        return self._call("score", req, context_id=req.context_id)

    def stream(self, req: GenerateRequest):
        h = self.handle.options(stream=True, multiplexed_model_id=req.context_id)
        return h.stream.remote(req)
