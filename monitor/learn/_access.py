"""Read or write, from a tool's name and description (the evidence of what changed comes from the learner)."""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ("prior_access", "words")

_READ: Final = frozenset(
    {
        "get", "list", "search", "find", "view", "show", "display", "check", "retrieve", "lookup", "look", "read",
        "fetch", "query", "count", "describe", "estimate", "compute", "calculate", "convert", "think", "ls", "pwd",
        "cat", "grep", "tail", "head", "diff", "wc", "du", "sort", "mean", "verify", "validate", "inspect", "browse",
        "preview", "stat", "stats", "status", "sum", "average", "summarize", "explain", "measure",
    }
)  # fmt: skip
_WRITE: Final = frozenset(
    {
        "create", "add", "update", "modify", "delete", "remove", "cancel", "book", "send", "post", "set", "register",
        "place", "exchange", "return", "transfer", "mkdir", "touch", "rm", "rmdir", "mv", "cp", "echo", "fill", "lock",
        "unlock", "start", "stop", "press", "release", "activate", "deactivate", "adjust", "edit", "close", "resolve",
        "follow", "unfollow", "retweet", "comment", "mention", "authenticate", "login", "logout", "purchase", "fund",
        "withdraw", "pay", "submit", "write", "upload", "insert", "save", "move", "copy", "rename", "assign", "apply",
        "approve", "reject", "enable", "disable", "reset", "change", "schedule", "reserve", "buy", "sell", "make",
        "put", "patch", "grant", "revoke", "invite", "share", "contact", "archive", "restore", "clear", "drop",
        "destroy", "open", "sign", "subscribe", "unsubscribe", "charge", "refund", "issue", "mark", "tag", "upgrade",
        "downgrade", "engage", "toggle", "turn", "navigate", "cd",
    }
)  # fmt: skip


def words(name: str) -> list[str]:
    """``getOrderDetails`` / ``get_order_details`` -> ``["get", "order", "details"]``."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)]


def _verb(word: str) -> str:
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and word[: -len(suffix)] in _READ | _WRITE:
            return word[: -len(suffix)]
    return word


def prior_access(name: str, description: str = "") -> Literal["read", "write"] | None:
    """What a tool's name says it does: its first word a reading verb, or any word a writing one.

    Falls back to the first word of the description ("Retrieves ...", "Cancel ...").
    ``None`` when neither says.
    """
    parts = words(name)
    if parts and parts[0] in _READ:
        return "read"
    if any(p in _WRITE for p in parts):
        return "write"
    said = words(description)
    if said and said[0] == "returns":  # "Returns the orders of ..." describes what a read gives back
        return "read"
    first = _verb(said[0]) if said else ""
    if first in _READ:
        return "read"
    if first in _WRITE:
        return "write"
    return None
