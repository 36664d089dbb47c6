"""Old names that keep working for one release: a module ``__getattr__`` that warns and forwards.

Used by prefixmon and its adapters when a public name moves or is renamed::

    __getattr__ = moved_names(__name__, {"OldName": "prefixmon.adapters.x:NewName"}, removal="0.3.0")

and, at a module's old path, when a whole module moves (``moved_module``), or in a package
that replaced a module of its name (``forward_names``).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ("forward_names", "moved_module", "moved_names")


def moved_names(module: str, moves: Mapping[str, str], *, removal: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for names that moved.

    Args:
        module: the module that defines the ``__getattr__`` (its ``__name__``).
        moves: ``{old name: "new.module:new_name"}``.
        removal: the release that removes the old names.
    """

    def __getattr__(name: str) -> Any:
        target = moves.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attr = target.partition(":")
        warnings.warn(
            f"{module}.{name} is deprecated and will be removed in {removal}; use {where}.{attr}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), attr)

    return __getattr__


def moved_module(old: str, new: ModuleType, *, removal: str) -> None:
    """Make the module being imported as ``old`` be ``new`` itself, with a DeprecationWarning.

    Called at the end of the shim left at the old path; after it, ``import old`` and
    ``import new`` give the same object, so identity checks and private names keep working.
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in {removal}; import {new.__name__}",
        DeprecationWarning,
        stacklevel=3,  # the import statement (importlib's frames are skipped)
    )
    sys.modules[old] = new


def forward_names(package: str, module: ModuleType) -> Callable[[str], Any]:
    """A package's ``__getattr__`` for every name of the module it replaced (now ``module``, inside it).

    The package re-exports ``module.__all__``; names outside it (helpers users may have
    imported) keep resolving, silently, as they did before the module became a package.
    """

    def __getattr__(name: str) -> Any:
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
