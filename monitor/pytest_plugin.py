"""pytest fixtures for testing your own toolset the way prefixmon tests its own.

Installed with prefixmon and registered through the ``pytest11`` entry point, so the
fixtures are there in any test once prefixmon is installed (``-p no:prefixmon`` turns them
off)::

    async def test_a_typed_id_is_refused(prefixmon_monitor, prefixmon_records, prefixmon_verdicts):
        monitor = prefixmon_monitor(my_tools, policy="block")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("complete_todo", {"todo_id": "todo-3"})
        assert prefixmon_records.one().fed == 1
        assert prefixmon_verdicts.causes() == [Cause.DEPENDENCY]

Every fixture is function-scoped: each test gets fresh captures and monitors. The entry point
names the top-level module ``_prefixmon_pytest``, which imports prefixmon only when a fixture
is used; this module is the same plugin under prefixmon's name (``pytest_plugins =
["prefixmon.pytest_plugin"]`` works too).
"""

from _prefixmon_pytest import MonitorFactory, prefixmon_monitor, prefixmon_records, prefixmon_verdicts

__all__ = ("MonitorFactory", "prefixmon_monitor", "prefixmon_records", "prefixmon_verdicts")
