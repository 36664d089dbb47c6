"""Argument types shared by the verbs."""

from __future__ import annotations

import argparse


def csv_list(text: str) -> list[str]:
    """``a, b,c`` -> ``["a", "b", "c"]`` (empty parts dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def int_list(text: str) -> list[int]:
    """``1,2,4`` -> ``[1, 2, 4]``."""
    try:
        return [int(part) for part in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated depths like 1,2,4,8; got {text!r}") from None


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> ``(KEY, VALUE)``; the value may be empty or contain ``=``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value
