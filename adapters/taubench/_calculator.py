"""The ``calculate`` tool both domains share: arithmetic evaluated from its syntax tree.

The original tool ``eval``s the expression after a character check; this one parses it with
``ast`` and evaluates only numbers and arithmetic operators, so it gives the same answers
and error texts for ordinary arithmetic without running any code, and refuses powers that
would take unbounded time or memory (any exponent above ``MAX_EXPONENT``, where the original
would still answer ``2**101``: the one place the two differ).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Final

__all__ = (
    "CALCULATOR_CHARS",
    "MAX_EXPONENT",
    "calculate",
    "evaluate",
)

CALCULATOR_CHARS: Final = frozenset("0123456789+-*/(). ")
"""The characters the original tool accepts."""
MAX_EXPONENT: Final = 100

_BINARY: Final[dict[type[ast.operator], Callable[[float, float], float]]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression.

    Raises:
        SyntaxError: the expression does not parse.
        ZeroDivisionError: it divides by zero.
        ValueError: it uses anything but numbers, parentheses and + - * / // % ** (powers
            up to ``MAX_EXPONENT``).
    """
    tree = ast.parse(expression.strip(), filename="<string>", mode="eval")
    return float(_value(tree.body))


def _value(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _value(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right:g} is larger than {MAX_EXPONENT}")
            power: float = float(left) ** right
            return power
        op = _BINARY.get(type(node.op))
        if op is not None:
            return op(left, right)
    raise ValueError("only numbers and arithmetic operators are allowed")


def calculate(expression: str) -> str:
    """The tool's answer: the value rounded to 2 decimals, or an ``Error: ...`` string."""
    if not all(char in CALCULATOR_CHARS for char in expression):
        return "Error: invalid characters in expression"
    try:
        return str(round(evaluate(expression), 2))
    except Exception as e:
        return f"Error: {e}"
