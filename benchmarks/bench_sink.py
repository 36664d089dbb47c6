"""Cost of the JSON Lines sink (issue 17's table, issue 19's writer). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_sink.py [--episodes 4000] [--rounds 5]

Sequential episodes of 1, 5 and 20 zero-rule calls, with a JSON Lines sink and without
one, in interleaved rounds (no sink, sink, ...) in one process; the ratio of the medians is
the sink's cost to the agent. Target: <= 1.3x. Every record is read back.

The other columns take the sink apart, measured in the same rounds:

- *writer parked*: the same sink with its writer thread never started, so lines are only
  queued (the hand-off without any writer activity; its lines are discarded unwritten).
  Its ratio against the live sink's is what the writer thread's wake-ups and writes cost
  the agent; *batches* says how often the live writer woke up to write.
- *floor: encoding*: a sink that encodes each record's line (``record_line``, what every
  hand-off does first) and drops it, inside the same episode loop. No JSON Lines sink can
  cost less without writing less. The cost of encoding one record in a hot loop is printed
  beside it (what earlier versions of this table called the floor; it is lower because the
  same record stays in the cache).
- *main-thread CPU*: ``time.thread_time`` of the agent's thread, sink against no sink
  (the machine's other load does not count there; the writer's own CPU is not in it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import anyio

from prefixmon import EpisodeRecord, JsonlSink, Monitor, Toolset, read_records
from prefixmon.records import record_line

TARGET = 1.3


def tools() -> Toolset:
    t = Toolset()

    @t.tool
    async def ping(n: int) -> int:
        """No rules."""
        return n

    return t


class EncodeOnlySink(JsonlSink):
    """A JSON Lines sink that encodes every record's line and drops it (the floor)."""

    def submit(self, record: EpisodeRecord) -> bool:
        """Encode, write nothing."""
        return bool(record_line(record))


def parked(sink: JsonlSink) -> JsonlSink:
    """``sink`` with its writer thread never started: lines are queued and stay there."""
    writer = sink._writer
    writer._start = lambda: None  # type: ignore[method-assign]
    return sink


def encode_cost(record: EpisodeRecord, n: int = 20_000) -> float:
    """Seconds to encode one record's line in a hot loop."""
    start = time.perf_counter()
    for _ in range(n):
        record_line(record)
    return (time.perf_counter() - start) / n


async def run(monitor: Monitor, episodes: int, calls: int) -> float:
    start = time.perf_counter()
    for i in range(episodes):
        async with monitor.episode(task_id=f"t{i}", labels={"model": "m", "method": "react"}) as ep:
            for n in range(calls):
                await ep.call("ping", {"n": n})
            ep.finish("success")
    return time.perf_counter() - start


@dataclass
class Side:
    monitor: Monitor
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    async def round(self, episodes: int, calls: int) -> None:
        cpu = time.thread_time()
        self.wall.append(await run(self.monitor, episodes, calls))
        self.cpu.append(time.thread_time() - cpu)


async def main(episodes: int, rounds: int) -> int:
    ts = tools()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        print(
            "| episode | no sink | JSON Lines sink | ratio | target | met | writer parked | batches per 1k records "
            "| floor: encoding (in the loop) | encoding one record, hot loop | main-thread CPU |"
        )
        print("|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|")
        for calls in (1, 5, 20):
            path = os.path.join(tmp, f"r{calls}.jsonl")
            sink = JsonlSink(path)
            idle = parked(JsonlSink(os.path.join(tmp, f"parked{calls}.jsonl")))
            floor = EncodeOnlySink(os.path.join(tmp, f"floor{calls}.jsonl"))
            bare, live = Side(Monitor(ts)), Side(Monitor(ts, sink=sink))
            sides = [bare, live, Side(Monitor(ts, sink=idle)), Side(Monitor(ts, sink=floor))]
            for side in sides:  # warm-up
                await run(side.monitor, 200, calls)
            sample = Monitor(ts)
            async with sample.episode(task_id="t0", labels={"model": "m", "method": "react"}) as ep:
                for n in range(calls):
                    await ep.call("ping", {"n": n})
                ep.finish("success")
            assert ep.record is not None
            enc = []
            batches = sink.stats.batches
            for r in range(rounds):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    await side.round(episodes, calls)
                enc.append(encode_cost(ep.record))
            batches = sink.stats.batches - batches
            assert sink.close()
            idle._writer._queue.clear()  # the parked lines are not this benchmark's output
            idle.close(0)
            floor.close()
            n = len(read_records(path))
            assert n == 200 + rounds * episodes, n
            us = [statistics.median(s.wall) / episodes * 1e6 for s in sides]
            cpu = [statistics.median(s.cpu) / episodes * 1e6 for s in sides]
            ra, rb, rp, rf = us
            ratio = rb / ra
            ok &= ratio <= TARGET
            met = "yes" if ratio <= TARGET else "**no**"
            print(
                f"| {calls} call(s) | {ra:.1f} us | {rb:.1f} us | {ratio:.2f}x | <= {TARGET}x | {met} | {rp / ra:.2f}x "
                f"| {1000 * batches / (rounds * episodes):.1f} | {rf / ra:.2f}x | {statistics.median(enc) * 1e6:.1f} us "
                f"| {cpu[1] / cpu[0]:.2f}x |"
            )
        print(f"\nevery record written and read back; sink stats of the last run: {sink.stats}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(anyio.run(main, args.episodes, args.rounds))
