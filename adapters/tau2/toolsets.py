"""Monitor toolsets declared from the real τ² tools.

Every tool of the domain's environment (and, in telecom, every tool of the user's phone)
is declared from its own OpenAI schema (``Tool.openai_schema``, what the agent is shown),
with ``read`` / ``write`` from τ²'s own type tags (``ToolType.WRITE`` is a write; ``read``,
``think`` and ``generic`` tools change nothing), in one of three modes:

- ``declared``: the references, preconditions and effects of :mod:`.rules`, read over the
  live environment (``state.env``, a :class:`~.env.Tau2Env`);
- ``dry_run``: run the call on an exact copy of the environment first
  (:meth:`~.env.Tau2Env.fork`) and accept only what the real one would accept;
- ``none``: schema checks and environment acceptance only.

Results are recognised as rejections as τ² signals them (see :func:`.rules.refusal`).
Tool metadata: ``domain``, ``write``, ``tool_type`` and ``actor`` (``assistant`` or ``user``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from prefixmon import Precondition, Toolset, TrackedState, dry_run

from .env import Domain, Tau2Env
from .rules import RULES, ToolRules, refusal

__all__ = ("MODES", "Mode", "toolset")

Mode = Literal["declared", "dry_run", "none"]
MODES: Final[tuple[Mode, ...]] = ("declared", "dry_run", "none")


def _error_result(tool: str) -> Any:
    def recognise(result: object) -> str | None:
        if not isinstance(result, str):
            return None
        return refusal(tool, result, result.startswith("Error:"))

    return recognise


def _dry_run(tool: str) -> Precondition:
    def run(clone: Tau2Env, args: Mapping[str, Any]) -> Any:
        outcome = clone.run(tool, args)
        return refusal(tool, outcome.content, outcome.error)

    def snapshot(env: Any) -> Any:
        return env.fork() if isinstance(env, Tau2Env) else None

    def judge(state: TrackedState, args: Mapping[str, Any]) -> str | None:
        if not isinstance(state.env, Tau2Env):
            return None
        result = inner.check(state, args)
        return result if isinstance(result, str) else None

    inner = dry_run(run, snapshot=snapshot, error_result=lambda r: r if isinstance(r, str) else None, name=f"dry_run_{tool}")
    return Precondition(check=judge, name="dry_run", message="a dry run on a copy of the environment was rejected")


def toolset(domain: Domain, mode: Mode = "declared", *, env: Tau2Env | None = None) -> Toolset:
    """The monitor toolset of a τ² domain: the agent's tools and (telecom) the user's.

    Args:
        domain: ``airline``, ``retail`` or ``telecom``.
        mode: ``declared``, ``dry_run`` or ``none`` (see the module docstring).
        env: an environment to read the tools from (default: a fresh one).

    Raises:
        ValueError: unknown mode, or rules naming a tool the environment does not have.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    env = env if env is not None else Tau2Env(domain)
    rules = RULES[domain]()
    tools = Toolset()
    seen: set[str] = set()
    for actor, kit in (("assistant", env.environment.tools), ("user", env.environment.user_tools)):
        if kit is None:
            continue
        for name, tool in kit.get_tools().items():
            seen.add(name)
            function = tool.openai_schema["function"]
            rule = rules.get(name, ToolRules())
            tool_type = env.tool_type(name)
            tools.add_schema(
                name,
                function.get("parameters"),
                description=function.get("description", ""),
                coercion="strict",  # tau2 calls the Python tool with the arguments as they are,
                unknown="forbid",  # and a keyword the function lacks raises TypeError
                requires=rule.requires if mode == "declared" else (_dry_run(name),) if mode == "dry_run" else (),
                produces=list(rule.produces),
                effects=rule.effects,
                refs=dict(rule.refs) if mode == "declared" else None,
                grounded=rule.grounded if mode == "declared" else None,
                error_result=_error_result(name),
                metadata={"domain": domain, "write": tool_type == "write", "tool_type": tool_type, "actor": actor},
            )
    unknown = sorted(set(rules) - seen)
    if unknown:
        raise ValueError(f"τ² {domain}: rules name tools the environment does not have: {unknown}")
    return tools
