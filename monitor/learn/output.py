"""Writing learned specs (YAML or JSON, stable order, no comments), merging them into existing ones, and diffs.

A learned rule is one with evidence; a rule without evidence was written by a person.
:func:`merge_spec` never changes a hand-written rule: it adds what the existing file does
not say, refreshes the evidence of rules learned before (keeping whether a person enabled a
suggestion), and keeps learned rules the new corpus does not mention. What it declined to
change is listed, so a reviewer sees where the corpus disagrees with the file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from ..exceptions import SpecError
from ..rules._compile import declares_arg_path
from ..rules.specfile import ArgRule, ErrorRule, Evidence, ObserveRule, RequireRule, SpecFile, ToolRules, parse_spec
from ..toolset import Toolset

__all__ = (
    "MergeResult",
    "count_rules",
    "diff_spec",
    "dump_spec",
    "fit_spec",
    "format_of",
    "merge_spec",
    "render_spec",
    "write_spec",
)

_SORTED: Final = frozenset({"tools", "args", "produces", "let", "evidence_for", "constants"})
"""Mappings written with their keys sorted (the rest keep the format's field order)."""


def format_of(path: str | os.PathLike[str]) -> str:
    """``yaml`` or ``json`` from a file name.

    Raises:
        SpecError: the extension is neither ``.yaml``, ``.yml`` nor ``.json``.
    """
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    raise SpecError(f"{os.fspath(path)}: a spec file ends in .yaml, .yml or .json")


def dump_spec(spec: SpecFile) -> dict[str, Any]:
    """The spec as plain data: defaults left out, names sorted, in the format's field order."""

    def order(value: Any, key: str | None) -> Any:
        if isinstance(value, dict):
            items = sorted(value.items()) if key in _SORTED else value.items()
            return {k: order(v, k) for k, v in items}
        if isinstance(value, list):
            return [order(v, None) for v in value]
        return value

    data = spec.model_dump(by_alias=True, exclude_defaults=True, mode="json")
    out: dict[str, Any] = order(data, None)
    return out


def render_spec(spec: SpecFile, format: str = "yaml") -> str:
    """The spec as YAML or JSON text that :func:`~prefixmon.rules.specfile.load_spec` reads back."""
    data = dump_spec(spec)
    if format == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if format == "yaml":
        text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)
        return text
    raise SpecError(f"unknown spec format {format!r}; use yaml or json")


def write_spec(spec: SpecFile, path: str | os.PathLike[str], *, format: str | None = None) -> Path:
    """Write the spec (format from the extension unless given); the file is replaced whole, never half-written.

    Raises:
        SpecError: an unknown extension or format.
        OSError: the file cannot be written.
    """
    file = Path(path)
    text = render_spec(spec, format or format_of(file))
    parse_spec(text, source=str(file), json_only=(format or format_of(file)) == "json")  # what we write reads back
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return file


def diff_spec(old: SpecFile | None, new: SpecFile, *, old_name: str = "current", new_name: str = "learned") -> str:
    """A unified diff between two specs, both rendered as canonical YAML (empty when they say the same)."""
    before = render_spec(old).splitlines(keepends=True) if old is not None else []
    after = render_spec(new).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, fromfile=old_name, tofile=new_name))


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeResult:
    """A merged spec, and the hand-written rules kept where the learner would have said something else."""

    spec: SpecFile
    kept: tuple[str, ...]


def merge_spec(existing: SpecFile, learned: SpecFile) -> MergeResult:
    """Merge a learned spec into an existing one without touching what a person wrote (see the module docstring)."""
    kept: list[str] = []
    tools: dict[str, ToolRules] = dict(existing.tools)
    for name, new in learned.tools.items():
        old = existing.tools.get(name)
        tools[name] = new if old is None else _merge_tool(name, old, new, kept)
    defaults = existing.defaults.model_copy(update={"errors": _merge_errors(existing.defaults.errors, learned.defaults.errors)})
    data = existing.model_copy(update={"tools": dict(sorted(tools.items())), "defaults": defaults})
    return MergeResult(spec=SpecFile.model_validate(dump_spec(data)), kept=tuple(kept))


def _merge_tool(name: str, old: ToolRules, new: ToolRules, kept: list[str]) -> ToolRules:
    evidence_for: dict[str, Evidence] = dict(old.evidence_for)
    # access: a person's choice stays
    access, access_evidence = old.access, old.evidence
    if old.access is not None and old.evidence is None:
        if new.access is not None and new.access != old.access:
            kept.append(f"tools.{name}.access: {old.access} (learned: {new.access})")
    elif new.access is not None:
        access, access_evidence = new.access, new.evidence
    # arguments
    args: dict[str, ArgRule] = dict(old.args)
    for path, rule in new.args.items():
        mine = old.args.get(path)
        if mine is not None and mine.evidence is None:
            if mine.model_dump(exclude={"evidence"}) != rule.model_dump(exclude={"evidence"}):
                kept.append(f"tools.{name}.args.{path}: hand-written rule kept (learned: {_describe_arg(rule)})")
            continue
        args[path] = rule
    # producers: one key per kind, one kind per key
    produces = dict(old.produces)
    hand_keys = {key: kind for kind, key in old.produces.items() if f"produces.{kind}" not in old.evidence_for}
    for kind, key in new.produces.items():
        hand = kind in old.produces and f"produces.{kind}" not in old.evidence_for
        if hand:
            if old.produces[kind] != key:
                kept.append(f"tools.{name}.produces.{kind}: {old.produces[kind]} kept (learned: {key})")
            continue
        if key in hand_keys and hand_keys[key] != kind:
            kept.append(f"tools.{name}.produces: {key} stays a {hand_keys[key]} (learned: a {kind})")
            continue
        produces[kind] = key
        if f"produces.{kind}" in new.evidence_for:
            evidence_for[f"produces.{kind}"] = new.evidence_for[f"produces.{kind}"]
    invalidates = tuple(dict.fromkeys((*old.invalidates, *new.invalidates)))
    for kind in new.invalidates:
        hand = kind in old.invalidates and f"invalidates.{kind}" not in old.evidence_for
        if not hand and f"invalidates.{kind}" in new.evidence_for:
            evidence_for[f"invalidates.{kind}"] = new.evidence_for[f"invalidates.{kind}"]
    observes: list[ObserveRule] = list(old.observes)
    for seen in new.observes:
        if not any(o.object == seen.object and o.at == seen.at for o in observes):
            observes.append(seen)
            if f"observes.{seen.object}" in new.evidence_for:
                evidence_for[f"observes.{seen.object}"] = new.evidence_for[f"observes.{seen.object}"]
    lets = dict(old.let)
    requires: list[RequireRule] = list(old.requires)
    for suggestion in new.requires:
        needs = {var: let for var, let in new.let.items() if _reads(suggestion.expr, var)}
        clash = [var for var, let in needs.items() if var in lets and lets[var] != let]
        if clash:
            kept.append(f"tools.{name}.let.{clash[0]}: kept; the learned suggestion {suggestion.expr!r} needs another {clash[0]}")
            continue
        lets.update(needs)
        at = next((i for i, r in enumerate(requires) if r.expr == suggestion.expr), None)
        if at is None:
            requires.append(suggestion)
        elif requires[at].evidence is not None:  # learned before: new evidence, the person's enabled and message stay
            requires[at] = requires[at].model_copy(update={"evidence": suggestion.evidence})
    return old.model_copy(
        update={
            "access": access,
            "evidence": access_evidence,
            "args": args,
            "produces": produces,
            "invalidates": invalidates,
            "observes": tuple(observes),
            "let": lets,
            "requires": tuple(requires),
            "errors": _merge_errors(old.errors, new.errors),
            "evidence_for": evidence_for,
        }
    )


def _reads(expr: str, var: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(var)}\b", expr) is not None


def _test(rule: ErrorRule) -> tuple[Any, ...]:
    return (rule.is_error, rule.text, rule.json_path, json.dumps(rule.equals, sort_keys=True, default=str))


def _merge_errors(old: tuple[ErrorRule, ...], new: tuple[ErrorRule, ...]) -> tuple[ErrorRule, ...]:
    out = list(old)
    for rule in new:
        at = next((i for i, r in enumerate(out) if _test(r) == _test(rule)), None)
        if at is None:
            out.append(rule)
        elif out[at].evidence is not None:
            out[at] = rule
    return tuple(out)


def _describe_arg(rule: ArgRule) -> str:
    data: Mapping[str, Any] = rule.model_dump(exclude={"evidence"}, exclude_defaults=True)
    return ", ".join(f"{k}: {v}" for k, v in data.items()) or "no rule"


def count_rules(spec: SpecFile) -> dict[str, int]:
    """How many rules of each kind a spec has (for summaries)."""
    counts = dict.fromkeys(
        (
            "references",
            "grounded",
            "derived",
            "producers",
            "invalidations",
            "error recognisers",
            "access",
            "preconditions",
            "enabled",
        ),
        0,
    )
    counts["error recognisers"] += len(spec.defaults.errors)
    for rules in spec.tools.values():
        for arg in rules.args.values():
            counts["references"] += arg.ref is not None
            counts["grounded"] += arg.grounded not in (False, "derived")
            counts["derived"] += arg.grounded == "derived"
        counts["producers"] += len(rules.produces)
        counts["invalidations"] += len(rules.invalidates)
        counts["error recognisers"] += len(rules.errors)
        counts["access"] += rules.access is not None
        counts["preconditions"] += sum(r.suggested for r in rules.requires)
        counts["enabled"] += sum(r.suggested and r.enabled for r in rules.requires)
    return counts


def fit_spec(tools: Toolset, spec: SpecFile) -> Toolset:
    """Apply a spec learned on other tools: only the tools and argument paths ``tools`` declares; a tool whose rules
    still do not compile there (a rule that reads an argument it lacks) is left out."""
    kept = {}
    for name, rules in spec.tools.items():
        base = tools.get(name)
        if base is not None:
            kept[name] = rules.model_copy(update={"args": {p: a for p, a in rules.args.items() if declares_arg_path(base, p)}})
    while True:
        try:
            return tools.apply_spec(spec.model_copy(update={"tools": kept}))
        except SpecError as e:
            bad = next((n for n in kept if f"tools.{n}" in str(e) or f"{n!r}" in str(e)), None)
            if bad is None:
                raise
            del kept[bad]
