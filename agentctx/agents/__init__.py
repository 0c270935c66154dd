"""Agents: roles that read a shared context through planned attention and return validated findings."""

from agentctx.agents import roles as _roles  # noqa: F401  (registers the built-in roles)
from agentctx.agents.base import ROLES, Agent, AgentSpec, AgentTask, ContextLLM, register_role
from agentctx.agents.taxonomy import CLAUSE_KINDS, CLAUSE_TAXONOMY, check_clause_kinds

__all__ = ["Agent", "AgentSpec", "AgentTask", "ContextLLM", "ROLES", "register_role", "CLAUSE_KINDS", "CLAUSE_TAXONOMY",
           "check_clause_kinds"]
