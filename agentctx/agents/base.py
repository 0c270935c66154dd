"""Agent base class, the user-written AgentSpec, and the LLM view an agent works through."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentctx.context import Context
from agentctx.retrieval.policy import AttendPlan, SelectionPolicy

__all__ = ["AgentSpec", "AgentTask", "Agent", "ContextLLM", "ROLES", "register_role", "CallStats"]


class AgentSpec(BaseModel):
    """An agent as a user declares it (in Python or pipeline YAML)."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="Registered role: summarizer, clause_extractor, risk_assessor, qa")
    name: str | None = Field(None, description="Display name; defaults to the role")
    instructions: str = Field("", description="Extra instructions placed before each task prompt")
    policy: SelectionPolicy | None = Field(None, description="Attend policy; None = the runtime's default")
    dense: bool = Field(False, description="Attend every page (the dense-attention peer)")
    max_new_tokens: int = Field(96, ge=1, le=4096)
    max_attempts: int = Field(2, ge=1, le=10, description="Structured-output attempts before failing")

    @property
    def display_name(self) -> str:
        return self.name or self.role


class AgentTask(BaseModel):
    """One task for an agent, as a pipeline step's fan-out makes it (``over`` items, ``task`` fields).

    The built-in roles read the named fields; any other field a pipeline sets is kept
    (``model_extra``) for roles of one's own.
    """

    model_config = ConfigDict(extra="allow")

    section: int = Field(0, ge=0, description="over='sections': index of the section")
    pages: list[int] | None = Field(None, description="over='sections': the section's pages (summarizer)")
    title: str | None = Field(None, description="over='sections': the section's title, when the document has one")
    char_start: int | None = Field(None, ge=0, description="over='sections': where the section starts in the text")
    char_end: int | None = Field(None, ge=0, description="over='sections': where the section ends in the text")
    clause: str | None = Field(None, description="Clause kind to extract (clause_extractor)")
    document: int | None = Field(None, ge=0, description="Which document of a case file the task is about "
                                                         "(retrieval.documents); None: the whole text")
    question: str | None = Field(None, description="Question to answer (qa)")
    input: dict[str, Any] | None = Field(None, description="over='step:<name>': one output of that step")
    inputs: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="Fan-in: the outputs of the steps named in the step's inputs")

    def need(self, field: str, role: str) -> Any:
        """The value of a field the role cannot work without."""
        value = getattr(self, field)
        if value is None:
            raise ValueError(f"{role} task needs {field!r}")
        return value


class CallStats(BaseModel):
    calls: int = 0
    generated_tokens: int = 0
    attended_tokens: int = 0
    context_tokens: int = 0
    ttft_s: float = 0.0
    model_s: float = 0.0

    @property
    def utilization(self) -> float:
        return self.attended_tokens / self.context_tokens if self.context_tokens else 0.0


class ContextLLM:
    """Completion and option choice over one attend plan (implements structured.LLM)."""

    def __init__(self, ctx: Context, plan: AttendPlan | None, stats: CallStats):
        self.ctx, self.plan, self.stats = ctx, plan, stats

    def complete(self, prompt: str, *, max_new_tokens: int = 64, stop: tuple[str, ...] = ("\n",),
                 copy_from: list[int] | None = None) -> str:
        t0 = time.perf_counter()
        res = self.ctx.generate(prompt, self.plan, max_new_tokens=max_new_tokens, stop=stop, copy_from=copy_from)
        s = self.stats
        s.calls += 1
        s.generated_tokens += len(res.token_ids)
        s.attended_tokens += res.attended_tokens
        s.context_tokens += res.context_tokens
        s.ttft_s += res.ttft_s
        s.model_s += time.perf_counter() - t0
        return res.text

    def scores(self, prompt: str, options: list[str], per_token: bool = False) -> list[float]:
        """Log-probability of each option after the prompt (per_token: divided by its length)."""
        t0 = time.perf_counter()
        scores = self.ctx.score(prompt, options, self.plan, per_token=per_token)
        self.stats.calls += 1
        # A scored choice reads the plan's pages like a generation does (dense: all of them).
        n = self.ctx.info.num_tokens
        self.stats.attended_tokens += self.plan.attended_tokens if self.plan is not None else n
        self.stats.context_tokens += self.plan.context_tokens if self.plan is not None else n
        self.stats.model_s += time.perf_counter() - t0
        return scores

    def choose(self, prompt: str, options: list[str], per_token: bool = False) -> int:
        scores = self.scores(prompt, options, per_token=per_token)
        return max(range(len(options)), key=scores.__getitem__)


ROLES: dict[str, type["Agent"]] = {}


def register_role(cls: type["Agent"]) -> type["Agent"]:
    if cls.role in ROLES:
        raise ValueError(f"role {cls.role!r} already registered")
    ROLES[cls.role] = cls
    return cls


class Agent(ABC):
    """A role: turns (context, task) into a validated output model."""

    role: ClassVar[str]
    output_schema: ClassVar[type[BaseModel]]

    def __init__(self, spec: AgentSpec):
        self.spec = spec
        self.stats = CallStats()

    def plan(self, ctx: Context, query: str) -> AttendPlan | None:
        """Pages to attend for this query; None = dense (every page)."""
        if self.spec.dense:
            return None
        return ctx.plan(query, self.spec.policy)

    def llm(self, ctx: Context, plan: AttendPlan | None) -> ContextLLM:
        return ContextLLM(ctx, plan, self.stats)

    def prompt(self, body: str) -> str:
        """Task prompt continuing after the document (the model is a plain completion model)."""
        head = f"\n\n{self.spec.instructions.strip()}\n" if self.spec.instructions.strip() else "\n\n"
        return head + body

    @abstractmethod
    def run(self, ctx: Context, task: AgentTask) -> BaseModel: ...
