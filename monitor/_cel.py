"""CEL expressions for spec-file preconditions (Google's CEL runtime, ``cel-expr-python``).

An expression is compiled and type-checked once, when its spec file is loaded, against the
variables it may read (``args``, the objects its rule binds, ``constants``); an undeclared name
or a syntax error is a load-time error. It is evaluated with an activation that holds only
those variables, so its cost does not depend on the size of the state. A field the
expression reads that the observed object lacks is *not observed*, which the caller turns
into an undetermined precondition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ("Expression", "ExpressionError", "NotObserved", "compile_expression")

INSTALL_HINT: Final = 'pip install "prefixmon[cel]"'


class ExpressionError(Exception):
    """An expression could not be compiled (the message says where and why)."""


class NotObserved(Exception):
    """The expression read a field that the observed objects do not have."""


def _cel() -> Any:
    try:
        from cel_expr_python import cel  # type: ignore[import-untyped]
    except ImportError as e:  # the optional extra
        raise ImportError(INSTALL_HINT) from e
    return cel


class Expression:
    """A compiled CEL expression over a fixed set of variables."""

    __slots__ = ("_compiled", "source", "variables")

    def __init__(self, compiled: Any, source: str, variables: tuple[str, ...]) -> None:
        self._compiled = compiled
        self.source = source
        self.variables = variables

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The expression's value.

        Raises:
            NotObserved: it read a field or key that is absent.
            RuntimeError: any other evaluation error (a type mismatch, a division by zero).
        """
        value = self._compiled.eval(data=activation)
        result = value.value()
        if value.type().name() == "ERROR":
            text = str(result)
            if text.startswith("NOT_FOUND") or "no such key" in text.lower():
                raise NotObserved(text)
            raise RuntimeError(f"the expression {self.source!r} failed: {text}")
        return result


def compile_expression(source: str, variables: Iterable[str]) -> Expression:
    """Compile and type-check ``source`` against ``variables`` (each of dynamic type).

    Raises:
        ExpressionError: a syntax error or an undeclared reference, with the column.
        ImportError: the ``cel`` extra is not installed (the message is the install command).
    """
    cel = _cel()
    names = tuple(dict.fromkeys(variables))
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in names})
    try:
        compiled = env.compile(source)
    except RuntimeError as e:
        raise ExpressionError(_tidy(str(e))) from None
    return Expression(compiled, source, names)


def _tidy(message: str) -> str:
    """The runtime's message without its status prefix and suffix, on one line."""
    text = message.removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
    lines = [line for line in text.splitlines() if line.strip()]
    head = lines[0].removeprefix("ERROR: <input>:") if lines else text
    return head.strip()
