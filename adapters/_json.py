"""Copying JSON data, which the benchmark environments load and copy for every task."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ("copy_json",)


def copy_json(value: Any) -> Any:
    """``copy.deepcopy(value)`` for data read from JSON, about 3x as fast.

    Dicts and lists are copied, strings, numbers, booleans and ``None`` shared (they are
    immutable); anything else is deep-copied. Unlike ``deepcopy``, a dict or list reached
    twice is copied twice and one that contains itself is not supported: what JSON gives
    never shares one.
    """
    t = type(value)
    if t is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if t is list:
        return [copy_json(v) for v in value]
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    return copy.deepcopy(value)
