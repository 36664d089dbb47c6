"""Fault injection for the JSON Lines sink: nothing finished is lost, nothing waits on the disk.

Each test injects one fault from issue 19's "Data loss" section and checks what survived.
The pids-limit, disk-full and read-only scenarios need root (a pids cgroup, a small tmpfs);
they are skipped with the reason elsewhere. docs/reliability.md tabulates the results.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from structlog.testing import capture_logs

from prefixmon import BadLine, JsonlSink, Monitor, Observer, Toolset, iter_records, read_records
from prefixmon.records import build_record, dumps_record

from .test_records import NOW, make


def _tools() -> Toolset:
    tools = Toolset()

    @tools.tool
    async def ping(n: int) -> int:
        """Answers at once."""
        return n

    return tools


async def _episodes(monitor: Monitor, n: int, *, concurrent: bool = True) -> None:
    async def one(i: int) -> None:
        async with monitor.episode(task_id=f"t{i}") as ep:
            await ep.call("ping", {"n": i})
            await anyio.sleep(0)

    if not concurrent:
        for i in range(n):
            await one(i)
        return
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)


def _script(body: str) -> str:
    """A child script: ``tools`` with ``ping``, ``run(monitor, n)`` running n concurrent episodes."""
    return textwrap.dedent(
        """
        import anyio, sys, threading
        from prefixmon import Monitor, Toolset
        tools = Toolset()

        @tools.tool
        async def ping(n: int) -> int:
            return n

        async def run(monitor, n):
            peak = [0]
            async def one(i):
                async with monitor.episode(task_id=f"t{i}") as ep:
                    await ep.call("ping", {"n": i})
                    await anyio.sleep(0.001)
                peak[0] = max(peak[0], threading.active_count())
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
            return peak[0]
        """
    ) + textwrap.dedent(body)


def _run(script: str, *, prefix: tuple[str, ...] = (), timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, **kw)


# -- privileges --------------------------------------------------------------------------------
def _pids_root() -> Path | None:
    v1 = Path("/sys/fs/cgroup/pids")
    if v1.is_dir():
        return v1
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "pids" in controllers.read_text().split():
        return v2
    return None


@contextlib.contextmanager
def pids_cgroup(limit: int) -> Iterator[Path]:
    """A fresh pids cgroup with ``pids.max = limit``; skips the test when one cannot be made."""
    root = _pids_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a pids cgroup controller (a container's pids limit)")
    group = root / f"prefixmon-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit))
    except OSError as e:
        pytest.skip(f"cannot create a pids cgroup here: {e}")
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path, size: str, *options: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted in ``tmp_path``; skips the test without mount privileges."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (disk-full and read-only scenarios)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    opts = ",".join((f"size={size}", *options))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


# -- the tests ---------------------------------------------------------------------------------
class TestOneWriter:
    """One long-lived writer per sink: no thread per record, nothing lost under concurrency."""

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    async def test_concurrent_episodes_start_one_thread(self, tmp_path: Path, anyio_backend: str) -> None:
        """500 concurrent episodes with a JSONL sink: at most one extra thread, every record written."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(_tools(), sink=path)
        before = threading.active_count()
        peak = before

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, threading.active_count())
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await _episodes(monitor, 500)
            tg.cancel_scope.cancel()
        assert peak <= before + 1
        records = read_records(path)
        assert sorted(r.task_id for r in records) == sorted(f"t{i}" for i in range(500))
        assert monitor.stats.sink_errors == monitor.stats.records_lost == 0

    @pytest.mark.parametrize("backend", ["asyncio", "trio"])
    def test_pids_limit(self, tmp_path: Path, backend: str) -> None:
        """Under a pids limit of 16 (containers set such limits) 500 concurrent episodes lose no record."""
        path = tmp_path / "r.jsonl"
        script = _script(
            f"""
            monitor = Monitor(tools, sink={str(path)!r})
            peak = anyio.run(run, monitor, 500, backend={backend!r})
            print(peak, monitor.stats.sink_errors, monitor.stats.records_lost)
            """
        )
        with pids_cgroup(16) as group:
            done = _run(script, prefix=("sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"))
        assert done.returncode == 0, done.stderr
        peak, errors, lost = (int(x) for x in done.stdout.strip().splitlines()[-1].split())
        assert (errors, lost) == (0, 0) and peak <= 3
        records = read_records(path)
        assert sorted(r.task_id for r in records) == sorted(f"t{i}" for i in range(500))

    def test_records_queued_at_exit_are_written(self, tmp_path: Path) -> None:
        """A process that ends right after its last episode (no close, no flush) still writes every record."""
        path = tmp_path / "r.jsonl"
        done = _run(_script(f"anyio.run(run, Monitor(tools, sink={str(path)!r}), 2000)"))
        assert done.returncode == 0, done.stderr
        assert len(read_records(path)) == 2000

    def test_sink_collected_while_its_writer_holds_its_lock(self, tmp_path: Path) -> None:
        """A sink's finalizer can run anywhere (a reference dropped, a GC pass), even while its
        writer holds its own lock: it must not wait for that lock (CI hung at exit this way)."""
        kept = JsonlSink(tmp_path / "r.jsonl")
        dropped = JsonlSink(tmp_path / "r.jsonl")  # the same writer: two users
        writer = kept._writer
        previous = OSError(errno.EIO, "an earlier failure")
        previous.sink = dropped  # type: ignore[attr-defined]  # its last reference, freed under the writer's lock
        writer.last_error = previous
        del dropped, previous
        failing = threading.Thread(target=writer._failed, args=(OSError(errno.EIO, "fails again"),), daemon=True)
        with capture_logs():
            failing.start()
            failing.join(10)
        assert not failing.is_alive(), "the writer deadlocked on its own lock"
        assert kept.submit(make([])) and kept.close(5)
        assert len(read_records(kept.path)) == 1

    def test_collected_sinks_close_their_writer(self, tmp_path: Path) -> None:
        """A sink dropped without close: its records are written and its writer is closed at the
        next sink's construction (the finalizer itself only notes it)."""
        path = tmp_path / "r.jsonl"
        sink = JsonlSink(path)
        writer = sink._writer
        assert sink.submit(make([]))
        del sink
        gc.collect()
        JsonlSink(tmp_path / "other.jsonl").close()
        assert writer._closing and writer.stats.written == 1 and writer._fd is None
        assert len(read_records(path)) == 1

    def test_thread_that_cannot_start_leaves_records_queued(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """When no writer thread can be started, records wait and flush() writes them from the caller."""
        sink = JsonlSink(tmp_path / "r.jsonl")

        def refuse(self: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        with capture_logs() as logs:
            monkeypatch.setattr(threading.Thread, "start", refuse)
            assert all(sink.submit(make([])) for _ in range(3))
            monkeypatch.undo()
        assert sink.stats.written == 0 and sink.stats.errors >= 1
        assert any(e["event"] == "sink_thread_failed" for e in logs)
        assert sink.flush(5)
        assert len(read_records(sink.path)) == 3
        assert sink.close()

    def test_batches_count_writes_not_records(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """``stats.batches`` counts writes: records queued together go out in one, a flush per record costs one each."""
        sink = JsonlSink(tmp_path / "r.jsonl")

        def refuse(self: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        with capture_logs():
            monkeypatch.setattr(threading.Thread, "start", refuse)
            assert all(sink.submit(make([])) for _ in range(100))
            monkeypatch.undo()
            assert sink.flush(5)  # written from here, all at once
        assert (sink.stats.written, sink.stats.batches) == (100, 1)
        for _ in range(5):
            assert sink.submit(make([])) and sink.flush(5)  # the writer thread wakes for each flush
        assert (sink.stats.written, sink.stats.batches) == (105, 6)
        assert sink.close()
        assert len(read_records(sink.path)) == 105

    async def test_sinks_of_one_file_share_a_writer_and_keep_order(self, tmp_path: Path) -> None:
        """Two monitors writing one file: records appear in the order the episodes ended."""
        path = tmp_path / "r.jsonl"
        a, b = Monitor(_tools(), sink=path), Monitor(_tools(), sink=path)
        for i in range(50):
            async with (a if i % 2 else b).episode(task_id=f"t{i}"):
                pass
        assert [r.task_id for r in read_records(path)] == [f"t{i}" for i in range(50)]


class TestFreshLines:
    """A line cut short never swallows the next record."""

    def test_fragment_left_by_a_crash(self, tmp_path: Path) -> None:
        """A file ending in half a line (a writer killed mid-write): the next record starts on a new line."""
        path = tmp_path / "r.jsonl"
        good = dumps_record(make([]))
        path.write_text(f"{good}\n{good[:57]}")
        with JsonlSink(path) as sink:
            sink.submit(make([]))
        errors: list[BadLine] = []
        records = list(iter_records(path, on_error="skip", errors=errors))
        assert len(records) == 2  # before the fix the new record was glued to the fragment and lost
        assert [(e.line, e.truncated) for e in errors] == [(2, False)]

    def test_fragment_another_writer_leaves_while_the_sink_is_open(self, tmp_path: Path) -> None:
        """Another process dies mid-write after this sink opened the file: this sink's next record
        still starts on a new line (the file's last byte is checked before every batch)."""
        path = tmp_path / "r.jsonl"
        good = dumps_record(make([]))
        with JsonlSink(path) as sink:
            sink.submit(make([]))
            assert sink.flush(5.0)
            with path.open("a") as other:  # a writer killed mid-write, as another process
                other.write(good[:57])
            sink.submit(make([]))
        errors: list[BadLine] = []
        records = list(iter_records(path, on_error="skip", errors=errors))
        assert len(records) == 2
        assert [(e.line, e.truncated) for e in errors] == [(2, False)]

    def test_file_size_limit_then_a_new_process(self, tmp_path: Path) -> None:
        """`ulimit -f` cuts writes short: the loss is counted and logged; the next process's record starts afresh."""
        path = tmp_path / "r.jsonl"
        limit = 4096

        def cap() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        script = _script(
            f"""
            monitor = Monitor(tools, sink={str(path)!r})
            anyio.run(run, monitor, 40)
            monitor.sink.close(1)
            s = monitor.sink.stats
            print(s.accepted, s.written, s.lost, s.errors)
            """
        )
        done = _run(script, preexec_fn=cap)
        assert done.returncode == 0, done.stderr
        counts = done.stdout.strip().splitlines()[-1]
        logs = done.stderr.splitlines()  # prefixmon logs through stdlib logging when structlog is not configured
        accepted, written, lost, errors = (int(x) for x in counts.split())
        assert accepted == 40 and written + lost == 40 and lost > 0 and errors >= 1
        assert any("sink_write_failed" in line for line in logs) and any("sink_records_lost" in line for line in logs)
        size = path.stat().st_size
        assert size <= limit
        with JsonlSink(path) as sink:  # no limit now
            sink.submit(make([]))
        errors_seen: list[BadLine] = []
        records = list(iter_records(path, on_error="skip", errors=errors_seen))
        assert len(records) == written + 1
        assert len(errors_seen) <= 1 and all(not e.truncated for e in errors_seen)

    def test_disk_full_then_space_returns(self, tmp_path: Path) -> None:
        """Disk full mid-write: the writer keeps the records and retries; once space returns every one is written whole."""
        with small_tmpfs(tmp_path, "64k") as mnt:
            ballast = mnt / "ballast"
            path = mnt / "r.jsonl"
            sink = JsonlSink(path)
            free = os.statvfs(mnt)
            with ballast.open("wb") as f, contextlib.suppress(OSError):  # leave two pages free
                f.write(b"x" * (free.f_bavail * free.f_frsize - 8192))
            with capture_logs() as logs:
                for i in range(40):
                    assert sink.submit(make_id(f"e{i}"))
                assert not sink.flush(0.5)  # the disk is full: not everything is in
            assert sink.stats.errors >= 1 and 0 < sink.stats.written < 40
            assert any(e["event"] == "sink_write_failed" for e in logs)
            ballast.unlink()
            assert sink.flush(10)
            assert sink.close()
            errors: list[BadLine] = []
            records = list(iter_records(path, on_error="skip", errors=errors))
            assert [r.episode_id for r in records] == [f"e{i}" for i in range(40)]
            assert errors == []  # the line the full disk cut was completed in place
            assert sink.stats.lost == 0


@contextlib.contextmanager
def _full_fifo(path: Path) -> Iterator[int]:
    """A FIFO whose pipe buffer is already full and that nobody reads: every write blocks (a hung mount).

    Yields a descriptor of the FIFO; on exit the pipe is read empty so the stuck writer can finish.
    """
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(fd, b"\0" * 65536)
        yield fd
    finally:
        with contextlib.suppress(BlockingIOError):
            while os.read(fd, 1 << 20):
                pass
        os.close(fd)


class TestStuckDisk:
    """A file that stops taking writes (a hung mount): episodes go on, losses are counted."""

    async def test_stuck_writer_never_blocks_episodes(self, tmp_path: Path) -> None:
        """The queue fills behind a blocked write: records are dropped and counted, never waited for."""
        with _full_fifo(tmp_path / "stuck"):
            sink = JsonlSink(tmp_path / "stuck", max_queue_bytes=64 * 1024)
            monitor = Monitor(_tools(), sink=sink)
            with anyio.fail_after(30), capture_logs():  # would hang forever if an episode waited on the write
                await _episodes(monitor, 600, concurrent=False)
            assert sink.stats.dropped > 0
            assert monitor.stats.records_lost == sink.stats.dropped
            assert not sink.close(timeout=0.2)
            s = sink.stats  # the batch stuck in write() is neither written nor given up yet
            assert s.accepted + s.dropped == 600 and s.written + s.lost < s.accepted

    async def test_close_reports_a_batch_stuck_in_write(self, tmp_path: Path) -> None:
        """Every accepted record taken by a blocked write: close says not all were written (it said all were)."""
        with _full_fifo(tmp_path / "stuck"):
            sink = JsonlSink(tmp_path / "stuck")
            monitor = Monitor(_tools(), sink=sink)
            with anyio.fail_after(30):
                await _episodes(monitor, 1, concurrent=False)
            assert not sink.flush(timeout=0.5)
            assert sink.stats.accepted == 1 and sink.stats.written == 0
            assert not sink.close(timeout=0.2)


class TestFileSystem:
    """Rotation, read-only file systems, paths that cannot be created."""

    async def test_rotated_file_is_reopened(self, tmp_path: Path) -> None:
        """logrotate-style move: later records go to a new file at the path, none to the moved one."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(_tools(), sink=path)
        await _episodes(monitor, 10, concurrent=False)
        assert isinstance(monitor.sink, JsonlSink) and monitor.sink.flush(5)
        path.rename(tmp_path / "r.jsonl.1")
        await _episodes(monitor, 5, concurrent=False)
        assert len(read_records(tmp_path / "r.jsonl.1")) == 10
        assert len(read_records(path)) == 5

    async def test_unwritable_path_is_counted_not_raised(self, tmp_path: Path) -> None:
        """A sink path under a regular file: construction succeeds; the failure is counted and logged."""
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        with capture_logs() as logs:
            monitor = Monitor(_tools(), sink=blocker / "sub" / "r.jsonl")  # raised NotADirectoryError before
            await _episodes(monitor, 3, concurrent=False)
        assert monitor.stats.sink_errors >= 1
        assert any(e["event"] == "monitor_internal_error" and e["where"] == "sink" for e in logs)
        sink = monitor.sink
        assert isinstance(sink, JsonlSink)
        assert not sink.close(timeout=0.5)
        assert sink.stats.lost == 3

    async def test_read_only_file_system(self, tmp_path: Path) -> None:
        """Monitor(sink=path) on a read-only mount: no exception; errors counted, the loss reported at close."""
        with small_tmpfs(tmp_path, "1m", "ro") as mnt:
            with capture_logs() as logs:
                monitor = Monitor(_tools(), sink=mnt / "r.jsonl")
                await _episodes(monitor, 3, concurrent=False)
                sink = monitor.sink
                assert isinstance(sink, JsonlSink)
                assert not sink.close(timeout=2)
            assert monitor.stats.sink_errors >= 1
            assert sink.last_error is not None and sink.last_error.errno == errno.EROFS
            assert sink.stats.lost == 3
            assert {"sink_write_failed", "sink_records_lost"} <= {e["event"] for e in logs}


class _Interrupting(Observer):
    def episode_finished(self, episode: Any, record: Any) -> None:
        raise KeyboardInterrupt


class TestStopped:
    """A process told to stop (SIGTERM turned into an exit, as servers do) keeps the record of
    the episode it was in, and everything finished before."""

    @pytest.mark.parametrize(
        ("backend", "how"),
        [
            ("asyncio", "handler"),  # signal.signal(SIGTERM, lambda *_: sys.exit(143))
            ("asyncio", "receiver"),
            ("trio", "handler"),
            ("trio", "receiver"),  # anyio.open_signal_receiver: the way trio supports
        ],
    )
    def test_sigterm_during_a_call(self, tmp_path: Path, backend: str, how: str) -> None:
        path = tmp_path / "r.jsonl"
        script = textwrap.dedent(
            f"""
            import anyio, signal, sys
            from prefixmon import Monitor, Toolset
            tools = Toolset()

            @tools.tool
            async def slow(n: int) -> int:
                await anyio.sleep(60)
                return n

            async def agent():
                monitor = Monitor(tools, sink={str(path)!r})
                for i in range(20):
                    async with monitor.episode(task_id=f"done{{i}}") as ep:
                        pass
                async with monitor.episode(task_id="running") as ep:
                    print("ready", flush=True)
                    await ep.call("slow", {{"n": 1}})

            async def main():
                if {how!r} == "handler":
                    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
                    await agent()
                    return
                with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(agent)
                        async for _ in signals:
                            tg.cancel_scope.cancel()  # the agent is cancelled, its episode closed
                            break
                sys.exit(143)

            anyio.run(main, backend={backend!r})
            """
        )
        argv = [sys.executable, "-X", "faulthandler", "-c", script]
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with child:
            try:
                assert child.stdout is not None
                ready = child.stdout.readline()
                child.terminate()
                _, err = child.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGABRT)  # faulthandler prints where it was stuck
                _, err = child.communicate()
                pytest.fail(f"the child did not end after SIGTERM:\n{err}")
        assert ready == "ready\n", err
        # an exception raised by a plain handler can land inside trio's scheduler, which then
        # ends with TrioInternalError (about 1 run in 20, as trio documents); the records stay whole
        trio_internal = backend == "trio" and how == "handler" and "TrioInternalError" in err
        assert child.returncode == 143 or trio_internal, err
        records = read_records(path)
        assert [r.task_id for r in records] == [*(f"done{i}" for i in range(20)), "running"], err
        assert records[-1].status in ("cancelled", "error")

    @pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
    @pytest.mark.parametrize(
        ("sink", "thread"),
        [("path", "prefixmon-sink"), ("callable", "prefixmon-worker")],  # the writer; the pool of plain sinks
    )
    def test_prefixmon_threads_never_take_the_agents_signals(self, tmp_path: Path, sink: str, thread: str) -> None:
        """A signal sent to the process waits for a thread of the agent's: the kernel hands a
        process-directed signal to any thread that does not block it, and a Python handler
        caught in one of ours sleeps until the main thread next runs (an asyncio loop with no
        wakeup fd sleeps through its ``sleep(60)``: CI saw that SIGTERM ignored). A plain
        sink still runs with the signals the agent has (a process it starts inherits them)."""
        path = str(tmp_path / "r.jsonl")
        script = textwrap.dedent(
            f"""
            import anyio, os, signal, threading
            from prefixmon import Monitor, Toolset
            tools = Toolset()
            masks = []

            def keep(record):
                masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))

            async def main():
                monitor = Monitor(tools, sink=keep if {sink!r} == "callable" else {path!r})
                async with monitor.episode(task_id="t"):
                    pass
                assert any(t.name.startswith({thread!r}) for t in threading.enumerate())
                assert masks in ([], [set()]), masks
                signal.signal(signal.SIGTERM, lambda *_: print("handled", flush=True))
                signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})  # the main thread is busy
                os.kill(os.getpid(), signal.SIGTERM)
                await anyio.sleep(0.2)
                print("pending" if signal.SIGTERM in signal.sigpending() else "taken", flush=True)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGTERM}})

            anyio.run(main)
            """
        )
        done = _run(script, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["pending", "handled"], done.stdout + done.stderr

    def test_coroutine_closed_outside_any_loop(self, tmp_path: Path) -> None:
        """An agent coroutine closed without a running loop (a crashed loop, garbage collection):
        the episode it was in still leaves its record."""

        class _Suspend:
            def __await__(self) -> Generator[None, None, None]:
                yield

        path = tmp_path / "r.jsonl"
        monitor = Monitor(_tools(), sink=path)

        async def agent() -> None:
            async with monitor.episode(task_id="t"):
                await _Suspend()

        coro = agent()
        coro.send(None)
        coro.close()
        (record,) = read_records(path)
        assert record.task_id == "t" and record.status == "cancelled"


class TestDelivery:
    """What the monitor does around delivery."""

    async def test_keyboard_interrupt_in_an_observer_still_delivers(self, tmp_path: Path) -> None:
        """Ctrl-C inside episode_finished propagates, and the record is still written."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(_tools(), sink=path, observers=[_Interrupting()])
        with pytest.raises(KeyboardInterrupt):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("ping", {"n": 1})
        (rec,) = read_records(path)
        assert rec.task_id == "t"

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a second native cancellation is asyncio's
    async def test_async_sink_cut_off_by_a_second_cancellation_is_counted(self, anyio_backend: str) -> None:
        """Cancelled in the body, then again while the record is delivered: the loss is counted and logged."""
        import asyncio

        in_sink = asyncio.Event()

        async def sink(record: Any) -> None:
            in_sink.set()
            await asyncio.sleep(5)

        monitor = Monitor(_tools(), sink=sink, sink_timeout=10)
        with capture_logs() as logs:
            await _cancelled_twice(monitor, in_sink.wait)
        assert monitor.stats.records_lost == 1
        assert [(e["where"], e["error_type"]) for e in logs if e["event"] == "monitor_internal_error"] == [
            ("sink", "CancelledError")
        ]

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a second native cancellation is asyncio's
    @pytest.mark.parametrize("fails", [False, True], ids=["delivers", "raises"])
    async def test_sync_sink_cut_off_by_a_second_cancellation_finishes_in_its_thread(
        self, anyio_backend: str, fails: bool
    ) -> None:
        """A plain sink runs in a thread, which a cancellation does not stop: the record it then
        writes is not counted lost, and an error it then raises is counted and logged."""

        in_sink, release, finished = threading.Event(), threading.Event(), threading.Event()
        kept: list[str] = []

        def sink(record: Any) -> None:
            in_sink.set()
            release.wait(10)
            try:
                if fails:
                    raise OSError("the sink failed after its caller stopped waiting")
                kept.append(record.task_id)
            finally:
                finished.set()

        monitor = Monitor(_tools(), sink=sink, sink_timeout=10)
        with capture_logs() as logs:
            await _cancelled_twice(monitor, functools.partial(anyio.to_thread.run_sync, in_sink.wait, 10))
            release.set()
            await anyio.to_thread.run_sync(finished.wait, 10)
            for _ in range(500):  # the thread accounts for the call right after the sink returns
                if not fails or monitor.stats.sink_errors:
                    break
                await anyio.sleep(0.01)
        assert monitor.stats.records_lost == 0
        assert kept == ([] if fails else ["t"])
        assert monitor.stats.sink_errors == int(fails)
        assert [(e["where"], e["error_type"]) for e in logs if e["event"] == "monitor_internal_error"] == (
            [("sink", "OSError")] if fails else []
        )

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])
    async def test_sync_sink_that_never_started_is_counted_lost(self, anyio_backend: str) -> None:
        """Every delivery thread busy and the wait cut off: the record never reached the sink."""
        import asyncio

        from prefixmon._internal.daemon_threads import DaemonThreads

        in_sink, release = threading.Event(), threading.Event()
        calls: list[str] = []

        def sink(record: Any) -> None:
            calls.append(record.task_id)
            in_sink.set()
            release.wait(10)

        monitor = Monitor(_tools(), sink=sink, sink_timeout=10)
        monitor._threads = DaemonThreads(max_threads=1)

        async def agent(task_id: str) -> None:
            async with monitor.episode(task_id=task_id):
                pass

        first = asyncio.ensure_future(agent("first"))
        await anyio.to_thread.run_sync(in_sink.wait, 10)
        second = asyncio.ensure_future(agent("second"))
        for _ in range(5):
            await asyncio.sleep(0)  # the second record waits for the only thread
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        release.set()
        await first
        assert calls == ["first"]
        assert monitor.stats.records_lost == 1


async def _cancelled_twice(monitor: Monitor, sink_entered: Callable[[], Awaitable[object]]) -> None:
    """Run an episode under asyncio, cancel it in its body, then again once its sink is entered."""
    import asyncio

    body = asyncio.Event()

    async def agent() -> None:
        async with monitor.episode(task_id="t"):
            body.set()
            await asyncio.sleep(5)

    task = asyncio.ensure_future(agent())
    await body.wait()
    task.cancel()
    await sink_entered()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def make_id(episode_id: str) -> Any:
    return build_record(episode_id=episode_id, task_id="t", labels={}, actions=[], outcome=None, started_at=NOW, ended_at=NOW)


class TestOtlpFileRotation:
    """The OTLP JSON file exporter follows a rotated file, as log handlers do."""

    def test_rotated_trace_file_is_reopened(self, tmp_path: Path) -> None:
        """Spans exported after a logrotate-style move go to a new file at the path."""
        from prefixmon.records.otlp import read_otlp_records
        from prefixmon.telemetry import Telemetry
        from prefixmon.telemetry.otel_setup import configure_otel

        traces = tmp_path / "t.otlp.jsonl"
        otel = configure_otel(otlp_file=traces, batch=False, service_name="rotation")
        monitor = Monitor(_tools(), observers=[Telemetry(tracer_provider=otel.tracer_provider, metrics=False)])
        anyio.run(lambda: _episodes(monitor, 3, concurrent=False))
        traces.rename(tmp_path / "t.otlp.jsonl.1")
        anyio.run(lambda: _episodes(monitor, 2, concurrent=False))
        otel.shutdown()
        assert len(read_otlp_records(tmp_path / "t.otlp.jsonl.1")) == 3
        assert len(read_otlp_records(traces)) == 2


_FORKED_MONITOR: list[Monitor] = []
"""The monitor a forked worker process inherits from the test (module level: the fork copies it)."""


def _forked_worker(i: int) -> None:
    async def run() -> None:
        async with _FORKED_MONITOR[0].episode(task_id=f"w{i}"):
            pass

    anyio.run(run)  # the record is queued as the worker returns; multiprocessing then ends it with os._exit


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
class TestForkedWorkers:
    """A monitor made before a fork, used in multiprocessing's forked workers."""

    def test_worker_records_are_written_before_the_worker_exits(self, tmp_path: Path) -> None:
        """multiprocessing ends its children with os._exit (no atexit): the child's writer is
        flushed by multiprocessing's own exit hook, so the last record of each worker is kept."""
        import multiprocessing

        path = tmp_path / "r.jsonl"
        monitor = Monitor(_tools(), sink=path)
        _FORKED_MONITOR[:] = [monitor]
        try:
            context = multiprocessing.get_context("fork")
            workers = [context.Process(target=_forked_worker, args=(i,)) for i in range(4)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(30)
            assert [w.exitcode for w in workers] == [0, 0, 0, 0]
            pool = context.Pool(2)
            pool.map(_forked_worker, range(4, 12))
            pool.close()  # (terminate(), what leaving `with Pool()` does, kills the workers with SIGTERM)
            pool.join()
        finally:
            _FORKED_MONITOR.clear()
        assert sorted(r.task_id for r in read_records(path)) == sorted(f"w{i}" for i in range(12))
