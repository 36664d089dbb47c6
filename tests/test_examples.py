"""Examples whose extra is missing stop with the exact install command, not a raw ModuleNotFoundError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

RUN_WITHOUT = """
import runpy, sys
for name in sys.argv[2:]:
    sys.modules[name] = None  # as if the package were not installed: importing it raises ModuleNotFoundError
sys.argv = sys.argv[:2]
runpy.run_path(sys.argv[1], run_name="__main__")
"""


@pytest.mark.parametrize(
    ("example", "missing", "hint"),
    [
        ("langchain_agent.py", ["langchain"], 'pip install "prefixmon[langchain]"'),
        ("mcp_client.py", ["mcp"], 'pip install "prefixmon[mcp]"'),
        ("mcp_server.py", ["mcp"], 'pip install "prefixmon[mcp]"'),
        ("openai_agents_agent.py", ["agents"], 'pip install "prefixmon[openai-agents]"'),
        ("openai_tool_calls.py", ["openai"], 'pip install "prefixmon[openai]"'),
        ("pydantic_ai_agent.py", ["pydantic_ai"], 'pip install "prefixmon[pydantic-ai]"'),
        ("bfcl_two_models.py", ["bfcl_eval"], 'pip install --no-deps "bfcl-eval==2026.3.23" "mpmath==1.3.0"'),
    ],
)
def test_missing_extra_prints_the_install_command(example: str, missing: list[str], hint: str) -> None:
    """Run the example with its framework made unimportable: exit 1, the hint on stderr, no traceback."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT, str(EXAMPLES / example), *missing],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only: the example stops at its imports
    )
    assert done.returncode == 1, done.stderr
    assert hint in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
