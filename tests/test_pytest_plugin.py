"""The pytest plugin (``pytest11`` entry point): users' own test files get the fixtures, run by a real pytest."""

from __future__ import annotations

from importlib.metadata import entry_points, version

import pytest

import prefixmon
from prefixmon import pytest_plugin

pytest_plugins = ("pytester",)

USER_TESTS = """
from typing import Annotated

import pytest

from prefixmon import Cause, Ref, ToolBlocked, Toolset


def todo_tools() -> Toolset:
    tools = Toolset()

    @tools.tool(produces="todo_id")
    def list_todos() -> list[dict[str, str]]:
        return [{"todo_id": "todo-3", "title": "milk"}]

    @tools.tool
    def complete_todo(todo_id: Annotated[str, Ref("todo_id")]) -> dict[str, bool]:
        return {"done": True}

    return tools


@pytest.mark.anyio
async def test_typed_id_is_refused(prefixmon_monitor, prefixmon_records, prefixmon_verdicts):
    monitor = prefixmon_monitor(todo_tools(), policy="block")
    async with monitor.episode(task_id="t") as ep:
        with pytest.raises(ToolBlocked):
            await ep.call("complete_todo", {"todo_id": "todo-3"})
        await ep.call("list_todos")
        assert (await ep.call("complete_todo", {"todo_id": "todo-3"})) == {"done": True}
        ep.finish("success")
    record = prefixmon_records.one()
    assert (record.fed, record.horizon, record.outcome) == (1, 3, "success")
    assert prefixmon_verdicts.causes() == [Cause.DEPENDENCY, None, None]


@pytest.mark.anyio
async def test_captures_are_fresh_per_test(prefixmon_records, prefixmon_verdicts):
    assert prefixmon_records.records == [] and prefixmon_verdicts.calls == []


@pytest.mark.anyio
async def test_own_observers_and_sink_are_respected(prefixmon_monitor, prefixmon_records, prefixmon_verdicts):
    mine = []

    async def sink(record):
        mine.append(record)

    monitor = prefixmon_monitor(todo_tools(), sink=sink)
    async with monitor.episode(task_id="t") as ep:
        await ep.call("list_todos")
    assert len(mine) == 1 and prefixmon_records.records == []
    assert prefixmon_verdicts.causes() == [None]
"""

BACKENDS = """
import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param
"""


class TestPlugin:
    """The fixtures as a user's test suite sees them."""

    def test_registered_through_the_entry_point(self) -> None:
        """``pytest11`` names the top-level ``_prefixmon_pytest``, so installing prefixmon is enough;
        ``prefixmon.pytest_plugin`` is the same plugin under prefixmon's name."""
        found = [ep for ep in entry_points(group="pytest11") if ep.name == "prefixmon"]
        assert [ep.value for ep in found] == ["_prefixmon_pytest"]
        plugin = found[0].load()
        same = [getattr(pytest_plugin, name) for name in pytest_plugin.__all__]
        assert [getattr(plugin, name) for name in plugin.__all__] == same

    def test_users_tests_run_with_the_fixtures(self, pytester: pytest.Pytester) -> None:
        """A user's test file, run by pytest with nothing but prefixmon installed: every test passes."""
        pytester.makeconftest(BACKENDS)
        pytester.makepyfile(test_user=USER_TESTS)
        result = pytester.runpytest_subprocess("-p", "anyio", "-W", "error")
        result.assert_outcomes(passed=6)  # 3 tests x the asyncio and trio backends

    def test_listed_by_pytest_fixtures(self, pytester: pytest.Pytester) -> None:
        """``pytest --fixtures`` shows each fixture with its docstring."""
        pytester.makepyfile(test_empty="def test_nothing():\n    pass\n")
        result = pytester.runpytest_subprocess("--fixtures")
        result.stdout.fnmatch_lines(["prefixmon_monitor*", "*factory of monitors*"])
        result.stdout.fnmatch_lines(["prefixmon_records*"])
        result.stdout.fnmatch_lines(["prefixmon_verdicts*"])

    def test_prefixmon_is_imported_by_the_first_fixture_not_by_pytest(self, pytester: pytest.Pytester) -> None:
        """Installed, the plugin costs a test run that does not use it nothing: importing prefixmon
        (about 0.3 s, and before pytest-cov starts, so unmeasured) waits for a prefixmon fixture."""
        pytester.makepyfile(
            test_light="""
import sys


def test_not_imported():
    assert "prefixmon" not in sys.modules


def test_imported(prefixmon_records):
    assert "prefixmon" in sys.modules and prefixmon_records.records == []
"""
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=2)

    def test_can_be_turned_off(self, pytester: pytest.Pytester) -> None:
        """``-p no:prefixmon`` removes the fixtures."""
        pytester.makepyfile(test_off="def test_uses(prefixmon_records):\n    pass\n")
        result = pytester.runpytest_subprocess("-p", "no:prefixmon")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*fixture 'prefixmon_records' not found*"])


class TestVersion:
    """``__version__`` comes from the installed distribution's metadata."""

    def test_matches_the_metadata(self) -> None:
        """One source of truth: pyproject.toml's version, as installed."""
        assert prefixmon.__version__ == version("prefixmon")
