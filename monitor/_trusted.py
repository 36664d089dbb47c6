"""Trusted construction of frozen slotted dataclasses on the hot path.

A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for every field (and
``__post_init__`` where defined), about twice the cost of setting the slots directly. Values
the monitor derived itself need no such checks, so hot paths build them with a constructor
generated once per class, the way attrs generates ``__init__``: positional (or keyword)
parameters in the given order, each stored by its slot descriptor. If the class's fields
ever differ from the names given, the plain constructor is used, so it is always correct.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ("trusted_constructor",)

T = TypeVar("T")


def trusted_constructor(cls: type[T], names: tuple[str, ...], defaults: dict[str, Any] | None = None) -> Callable[..., T]:
    """A constructor of ``cls`` taking ``names`` in order that skips ``__init__`` and ``__post_init__``.

    Args:
        cls: a dataclass with ``slots=True``.
        names: every field, in declaration order.
        defaults: default values of trailing parameters.

    The caller guarantees what ``__post_init__`` would check.
    """
    defaults = defaults or {}
    params = ", ".join(f"{n}=_d_{n}" if n in defaults else n for n in names)
    namespace: dict[str, Any] = {f"_d_{n}": v for n, v in defaults.items()}
    if tuple(f.name for f in fields(cls)) != names:  # type: ignore[arg-type]
        namespace["_cls"] = cls
        body = f"    return _cls({', '.join(f'{n}={n}' for n in names)})\n"
    else:
        namespace["_new"] = object.__new__
        namespace["_cls"] = cls
        for n in names:
            namespace[f"_s_{n}"] = getattr(cls, n).__set__
        body = "    obj = _new(_cls)\n" + "".join(f"    _s_{n}(obj, {n})\n" for n in names) + "    return obj\n"
    exec(f"def build({params}):\n{body}", namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = f"trusted {cls.__name__}"
    build.__doc__ = f"``{cls.__name__}(...)`` from trusted values, without ``__init__`` checks."
    return build
