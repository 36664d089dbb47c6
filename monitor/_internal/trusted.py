"""Trusted construction of frozen slotted dataclasses on the hot path.

A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for every field (and
``__post_init__`` where defined), and even setting the slots through their descriptors
costs a C-level call per field. Values the monitor derived itself need no such checks, so
hot paths build them with a constructor generated once per class, the way attrs generates
``__init__``: positional (or keyword) parameters in the given order.

The constructor fills a *twin*: a plain mutable class with exactly the dataclass's slots, so
each field is one plain attribute store, and then gives the object its real class (the
layouts are identical, so CPython allows the ``__class__`` assignment). That is about half
the cost of setting the slots through their descriptors (0.41 µs against 0.84 µs for the
13 fields of an ``ActionRecord``, measured together in one process) and a quarter of the
frozen ``__init__``; every call makes a verdict and an action record, so it shows in the
per-call overhead (``benchmarks/bench_hot_path.py``). The object is a normal instance of
the dataclass afterwards (equality, hashing, pickling, pydantic serialisation, frozenness).
If the twin cannot take the class's layout, the slots are set through their descriptors.
The names must be the class's fields, all of them in order: anything else raises when the
constructor is made (at import), so a field added to a class can never be silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ("trusted_constructor",)

T = TypeVar("T")


def _twin(cls: type[Any]) -> type[Any] | None:
    """A mutable class whose instances may become instances of ``cls``, or ``None``."""
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": slots})
    try:
        probe: Any = object.__new__(twin)
        probe.__class__ = cls
    except TypeError:  # a layout CPython will not convert (another base, a __weakref__ slot, ...)
        return None
    return twin


def trusted_constructor(cls: type[T], names: tuple[str, ...], defaults: dict[str, Any] | None = None) -> Callable[..., T]:
    """A constructor of ``cls`` taking ``names`` in order that skips ``__init__`` and ``__post_init__``.

    Args:
        cls: a dataclass with ``slots=True``.
        names: every field, in declaration order.
        defaults: default values of trailing parameters.

    The caller guarantees what ``__post_init__`` would check.

    Raises:
        TypeError: ``names`` are not the class's fields in declaration order.
    """
    declared = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    if declared != names:
        raise TypeError(f"trusted {cls.__name__} names {names}, but its fields are {declared}")
    defaults = defaults or {}
    params = ", ".join(f"{n}=_d_{n}" if n in defaults else n for n in names)
    namespace: dict[str, Any] = {f"_d_{n}": v for n, v in defaults.items()}
    namespace["_cls"] = cls
    namespace["_new"] = object.__new__
    twin = _twin(cls)
    if twin is not None:
        namespace["_twin"] = twin
        body = (
            "    obj = _new(_twin)\n"
            + "".join(f"    obj.{n} = {n}\n" for n in names)
            + "    obj.__class__ = _cls\n    return obj\n"
        )
    else:
        for n in names:
            namespace[f"_s_{n}"] = getattr(cls, n).__set__
        body = "    obj = _new(_cls)\n" + "".join(f"    _s_{n}(obj, {n})\n" for n in names) + "    return obj\n"
    exec(f"def build({params}):\n{body}", namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = f"trusted {cls.__name__}"
    build.__doc__ = f"``{cls.__name__}(...)`` from trusted values, without ``__init__`` checks."
    return build
