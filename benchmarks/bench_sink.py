"""Cost of the JSON Lines sink (issue 17's table, issue 19's writer). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_sink.py [--episodes 4000] [--rounds 5]

Sequential episodes of 1, 5 and 20 zero-rule calls, with a JSON Lines sink and without
one, in interleaved rounds (no sink, sink, no sink, ...) in one process; the ratio of the
medians is the sink's cost to the agent. Target: <= 1.3x. Every record is read back.
The floor column is what the hand-off alone costs (encoding the record's line, measured on
the same records in the same run): no sink can cost less without writing less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

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


def encode_cost(record: EpisodeRecord, n: int = 20_000) -> float:
    """Seconds to encode one record's line (what every hand-off to the sink does)."""
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


async def main(episodes: int, rounds: int) -> int:
    ts = tools()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        print("| episode | no sink | JSON Lines sink | ratio | target | met | floor: encoding the line |")
        print("|---|---:|---:|---:|---:|:---:|---:|")
        for calls in (1, 5, 20):
            path = os.path.join(tmp, f"r{calls}.jsonl")
            sink = JsonlSink(path)
            bare, with_sink = Monitor(ts), Monitor(ts, sink=sink)
            await run(bare, 200, calls)  # warm-up
            await run(with_sink, 200, calls)
            a, b, enc = [], [], []
            sample = Monitor(ts)
            async with sample.episode(task_id="t0", labels={"model": "m", "method": "react"}) as ep:
                for n in range(calls):
                    await ep.call("ping", {"n": n})
                ep.finish("success")
            assert ep.record is not None
            for _ in range(rounds):
                a.append(await run(bare, episodes, calls))
                b.append(await run(with_sink, episodes, calls))
                enc.append(encode_cost(ep.record))
            assert sink.close()
            n = len(read_records(path))
            assert n == 200 + rounds * episodes, n
            ra, rb = statistics.median(a) / episodes * 1e6, statistics.median(b) / episodes * 1e6
            re = statistics.median(enc) * 1e6
            ratio = rb / ra
            ok &= ratio <= TARGET
            met = "yes" if ratio <= TARGET else "**no**"
            floor = f"{re:.1f} us = {(ra + re) / ra:.2f}x"
            print(f"| {calls} call(s) | {ra:.1f} us | {rb:.1f} us | {ratio:.2f}x | <= {TARGET}x | {met} | {floor} |")
        print(f"\nevery record written and read back; sink stats of the last run: {sink.stats}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(anyio.run(main, args.episodes, args.rounds))
