"""Pipeline DSL: steps (agents), their inputs, fan-out and fan-in, as data.

A pipeline is a validated ``PipelineSpec`` (pydantic, loadable from YAML) or is
built in Python with ``Pipeline``:

    p = Pipeline("quick_review")
    clauses = p.step("clauses", AgentSpec(role="clause_extractor"),
                     over=[{"clause": k} for k in ("termination", "payment")])
    p.step("risks", AgentSpec(role="risk_assessor"), over=clauses, when="present")

Fan-out: ``over`` is a list of task dicts (one agent task each), ``"sections"``
(one task per section of the context, with its pages), or another step (one task
per output of that step, given as ``task["input"]``, filtered by ``when``: a
truthy field of the output). Fan-in: a step lists other steps in ``inputs``; their
outputs arrive as ``task["inputs"][name]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentctx.agents import ROLES, AgentSpec

__all__ = ["StepSpec", "PipelineSpec", "Pipeline", "load_pipeline"]


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
    agent: AgentSpec
    over: list[dict[str, Any]] | Literal["sections"] | str | None = Field(
        None, description="Fan-out: task list, 'sections', or 'step:<name>' (one task per output)")
    when: str | None = Field(None, description="With over=step:<name>: keep outputs whose field is truthy")
    inputs: list[str] = Field(default_factory=list, description="Steps whose outputs this step receives (fan-in)")
    task: dict[str, Any] = Field(default_factory=dict, description="Fields merged into every task")
    retries: int = Field(1, ge=0, le=10)
    timeout_s: float = Field(600.0, gt=0)
    num_agents: int | None = Field(
        None, ge=1, le=64, description="Agent actors serving this step's tasks (each runs its tasks one after "
                                       "another); None = the pipeline's max_concurrency")

    @field_validator("agent", mode="before")
    @classmethod
    def _role_shorthand(cls, v):
        return {"role": v} if isinstance(v, str) else v

    @field_validator("over")
    @classmethod
    def _over(cls, v):
        if isinstance(v, str) and v != "sections" and not v.startswith("step:"):
            raise ValueError(f"over must be a list of tasks, 'sections' or 'step:<name>', got {v!r}")
        return v

    @property
    def source_step(self) -> str | None:
        return self.over[5:] if isinstance(self.over, str) and self.over.startswith("step:") else None

    @property
    def depends_on(self) -> list[str]:
        src = self.source_step
        return list(dict.fromkeys(([src] if src else []) + self.inputs))


class PipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    steps: list[StepSpec] = Field(min_length=1)
    max_concurrency: int = Field(4, ge=1, le=256, description="Agent tasks in flight at once")
    section_pages: int | None = Field(None, ge=1, description="Pages per section for over='sections'")

    @model_validator(mode="after")
    def _graph(self) -> "PipelineSpec":
        names = [s.name for s in self.steps]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate step names: {sorted(dup)}")
        for s in self.steps:
            if s.agent.role not in ROLES:
                raise ValueError(f"step {s.name!r}: unknown role {s.agent.role!r}; known: {sorted(ROLES)}")
            for d in s.depends_on:
                if d not in names:
                    raise ValueError(f"step {s.name!r} depends on unknown step {d!r}")
        self.order()  # raises on cycles
        return self

    def order(self) -> list[StepSpec]:
        """Steps in a dependency-respecting order; ValueError on a cycle."""
        by_name = {s.name: s for s in self.steps}
        done: list[str] = []
        visiting: set[str] = set()

        def visit(n: str) -> None:
            if n in done:
                return
            if n in visiting:
                raise ValueError(f"pipeline has a dependency cycle through step {n!r}")
            visiting.add(n)
            for d in by_name[n].depends_on:
                visit(d)
            visiting.discard(n)
            done.append(n)

        for s in self.steps:
            visit(s.name)
        return [by_name[n] for n in done]


class Pipeline:
    """Python builder for a PipelineSpec; ``step`` returns the step name for wiring."""

    def __init__(self, name: str, description: str = "", max_concurrency: int = 4,
                 section_pages: int | None = None):
        self.name, self.description = name, description
        self.max_concurrency, self.section_pages = max_concurrency, section_pages
        self._steps: list[StepSpec] = []

    def step(self, name: str, agent: AgentSpec | str, *, over: Any = None, when: str | None = None,
             inputs: list[str] | None = None, **options: Any) -> str:
        if isinstance(over, str) and over != "sections" and not over.startswith("step:"):
            over = f"step:{over}"  # a step name returned by an earlier .step()
        self._steps.append(StepSpec(name=name, agent=agent, over=over, when=when, inputs=inputs or [], **options))
        return name

    @property
    def spec(self) -> PipelineSpec:
        return PipelineSpec(name=self.name, description=self.description, steps=self._steps,
                            max_concurrency=self.max_concurrency, section_pages=self.section_pages)


def load_pipeline(path: str | Path) -> PipelineSpec:
    """Read a pipeline from YAML; errors name the failing field."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"pipeline file {str(p)!r} not found")
    data = yaml.safe_load(p.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"pipeline file {p} must hold a mapping")
    return PipelineSpec.model_validate(data)
