"""Per-depth curves stored by what is in them: a step function, not one value per depth.

PEC(k), n_k and PEC_elig(k) change only at depths where some episode's FED or horizon
lies, so a cohort's curve is kept as its change points (knots) and the value from each
knot on. A cohort of one episode with a bare horizon of 100,000 holds two knots, not
100,000 floats; reading the curve (indexing, slicing, iterating, ``list(...)``) gives the
same values a dense tuple would.

The report's JSON writes each curve in the same form (:func:`curve_dict`)::

    {"length": 100000, "depth": [1, 4], "value": [1.0, 0.5]}

``value[j]`` holds at every depth k with ``depth[j] <= k < depth[j + 1]`` (the last one
through ``length``); ``depth`` lists only the depths where the value changes, starting at 1.
:meth:`StepCurve.from_dict` reads it back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

import numpy as np
import numpy.typing as npt

__all__ = ["StepCurve", "curve_dict"]

T = TypeVar("T", float, int, "float | None")

_CHUNK = 4096


class StepCurve(Sequence[T], Generic[T]):
    """A read-only sequence of ``length`` values (index 0 = depth 1), constant between knots.

    Args:
        length: number of depths.
        knots: sorted 1-based depths where a new value starts (the first must be 1).
        values: the value from each knot on (NaN stands for ``None`` when ``none_for_nan``).
        kind: ``float`` or ``int``: the Python type of the values handed out.
        none_for_nan: hand out ``None`` for NaN (undefined PEC_elig).
    """

    __slots__ = ("_kind", "_knots", "_length", "_none", "_values")

    def __init__(
        self,
        length: int,
        knots: npt.NDArray[np.int64],
        values: npt.NDArray[Any],
        *,
        kind: type = float,
        none_for_nan: bool = False,
    ) -> None:
        if length and (not len(knots) or int(knots[0]) != 1):
            raise ValueError("a curve's first knot must be depth 1")
        self._length = length
        self._knots = knots
        self._values = values
        self._kind = kind
        self._none = none_for_nan

    def __len__(self) -> int:
        return self._length

    def _convert(self, raw: npt.NDArray[Any]) -> list[T]:
        out: list[Any] = raw.tolist() if self._kind is float else [int(x) for x in raw.tolist()]
        if self._none:
            out = [None if x != x else x for x in out]  # NaN -> None
        return out

    def _dense(self, start: int, stop: int) -> list[T]:
        depths = np.arange(start + 1, stop + 1, dtype=np.int64)
        at = np.searchsorted(self._knots, depths, side="right") - 1
        return self._convert(self._values[at])

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step == 1:
                return tuple(self._dense(start, max(start, stop)))
            return tuple(self[i] for i in range(start, stop, step))
        i = index + self._length if index < 0 else index
        if not 0 <= i < self._length:
            raise IndexError("curve index out of range")
        return self._dense(i, i + 1)[0]

    def __iter__(self) -> Iterator[T]:
        for start in range(0, self._length, _CHUNK):
            yield from self._dense(start, min(self._length, start + _CHUNK))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepCurve):  # by their steps: never one value per depth
            return len(self) == len(other) and self.steps() == other.steps()
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        if self._length <= 12:
            return f"StepCurve({list(self)!r})"
        return f"StepCurve(length={self._length}, knots={len(self._knots)})"

    def steps(self) -> tuple[list[int], list[T]]:
        """``(depths, values)``: the depths where the value changes (the first is 1) and the value from each on."""
        if not self._length:
            return [], []
        change = _changes(self._values)
        return [int(k) for k in self._knots[change].tolist()], self._convert(self._values[change])

    def to_dict(self) -> dict[str, Any]:
        """``{"length": K, "depth": [...], "value": [...]}`` (NaN as ``None``): the JSON form."""
        depths, values = self.steps()
        return {"length": self._length, "depth": depths, "value": [None if v != v else v for v in values]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepCurve[Any]:
        """The curve of a :meth:`to_dict` document (``None`` values read back as ``None``).

        Raises:
            ValueError: depths that do not start at 1 and increase, or lists of different lengths.
        """
        length, depths, values = int(data["length"]), list(data["depth"]), list(data["value"])
        if len(depths) != len(values) or any(b <= a for a, b in itertools.pairwise(depths)) or (depths and depths[-1] > length):
            raise ValueError("a curve's depths must increase within its length, one value each")
        array, kind = _array(values)
        return cls(length, np.array(depths, dtype=np.int64), array, kind=kind, none_for_nan=None in values)

    def last_positive(self) -> int:
        """The deepest depth whose value is above 0 (0 when none is)."""
        vals = np.nan_to_num(self._values.astype(np.float64), nan=0.0)
        pos = np.flatnonzero(vals > 0)
        if not pos.size:
            return 0
        j = int(pos[-1])
        return self._length if j == len(self._knots) - 1 else int(self._knots[j + 1]) - 1


def _changes(values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Which entries differ from the one before (the first always does; NaN equals NaN)."""
    if not len(values):
        return np.zeros(0, dtype=np.bool_)
    prev, cur = values[:-1], values[1:]
    same = prev == cur
    if values.dtype.kind == "f":
        same |= np.isnan(prev) & np.isnan(cur)
    return np.concatenate([[True], ~same])


def curve_dict(curve: Sequence[Any]) -> dict[str, Any]:
    """The JSON form of a per-depth curve (index 0 = depth 1): see the module docstring.

    A :class:`StepCurve` gives its steps; any other sequence is read once and its runs merged.
    """
    if isinstance(curve, StepCurve):
        return curve.to_dict()
    values = list(curve)
    array, kind = _array(values)
    knots = np.arange(1, len(values) + 1, dtype=np.int64)
    return StepCurve(len(values), knots, array, kind=kind, none_for_nan=None in values).to_dict()


def _array(values: Sequence[Any]) -> tuple[npt.NDArray[Any], type]:
    """Curve values as an array and their kind: integers stay integers, ``None`` becomes NaN."""
    if all(isinstance(v, int) for v in values):
        return np.array(values, dtype=np.int64), int
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64), float
