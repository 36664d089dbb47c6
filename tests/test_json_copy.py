"""``copy_json``: what ``copy.deepcopy`` gives for JSON data, without sharing a container."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from prefixmon.adapters._json import copy_json

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


@given(json_data)
def test_copies_json_data_as_deepcopy_does(value: Any) -> None:
    copied = copy_json(value)
    assert repr(copied) == repr(copy.deepcopy(value))  # repr: NaN is not equal to itself
    assert not set(_containers(copied)) & set(_containers(value))


def test_other_values_are_deep_copied() -> None:
    inner = {"day": [1]}
    value = {"when": (inner,), "at": dt.date(2024, 5, 1), "n": 1}
    copied = copy_json(value)
    copied["when"][0]["day"].append(2)
    assert copied == {"when": ({"day": [1, 2]},), "at": dt.date(2024, 5, 1), "n": 1} and inner == {"day": [1]}
