"""Argument types shared by the verbs."""

from __future__ import annotations

import argparse


def csv_list(text: str) -> list[str]:
    """``a, b,c`` -> ``["a", "b", "c"]`` (empty parts dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def int_list(text: str) -> list[int]:
    """``1,2,4`` -> ``[1, 2, 4]``: depths, each >= 1."""
    try:
        depths = [int(part) for part in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated depths like 1,2,4,8; got {text!r}") from None
    if not depths or min(depths) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated depths >= 1 like 1,2,4,8; got {text!r}")
    return depths


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


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return value


def fraction(text: str) -> float:
    """An argparse type: a share in [0, 1]."""
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def level(text: str) -> float:
    """An argparse type: a confidence level in (0, 1)."""
    value = _number(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), e.g. 0.95; got {text}")
    return value
