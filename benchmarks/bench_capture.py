"""Cost of recording one captured value (Telemetry(capture_content=True)). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_capture.py [--items 1000000] [--cap 4096]

Compares, in the same run, prefixmon.records.redaction.content_text (serialisation that stops at the
cap, keys masked in the same pass) with what capture did before tracker issue 19: serialise
the whole value with json.dumps (C speed) and cut the text afterwards, and, for redact_keys,
first walk the whole value into a redacted copy. Values: a list of N small dicts (a database
dump a tool returned), a small argument dict, and N-item JSON text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from prefixmon.records.redaction import content_text, redact_keys


def _old_cut(value: Any, cap: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= cap else f"{text[:cap]}...[{len(text) - cap} more chars]"


def _old_walk(value: Any, wanted: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: "[REDACTED]" if str(k).lower() in wanted else _old_walk(v, wanted) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_old_walk(v, wanted) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return _old_walk(json.loads(value), wanted)
        except ValueError:
            return value
    return value


def _time(fn: Callable[[], Any], rounds: int) -> float:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def _repeat(fn: Callable[[], Any], reps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(reps):
            fn()

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--cap", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    cap, n = ns.cap, ns.items
    rows = [{"id": i, "name": f"user {i}", "token": f"t-{i}"} for i in range(n)]
    small = {"person_id": "p-1", "text": "hello", "token": "t"}
    text = json.dumps(rows[:10_000])
    keys = redact_keys("token")
    wanted = frozenset({"token"})
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (f"{n:,} dicts, no redaction", lambda: content_text("result", rows, None, cap), lambda: _old_cut(rows, cap)),
        (
            f"{n:,} dicts, redact_keys",
            lambda: content_text("result", rows, keys, cap),
            lambda: _old_cut(_old_walk(rows, wanted), cap),
        ),
        (
            "10,000-item JSON text, redact_keys",
            lambda: content_text("result", text, keys, cap),
            lambda: _old_cut(_old_walk(text, wanted), cap),
        ),
        ("small argument dict, no redaction", lambda: content_text("arguments", small, None, cap), lambda: _old_cut(small, cap)),
        (
            "small argument dict, redact_keys",
            lambda: content_text("arguments", small, keys, cap),
            lambda: _old_cut(_old_walk(small, wanted), cap),
        ),
    ]
    print(f"| value (cap {cap}) | bounded (now) | serialise whole, then cut (before) | ratio |")
    print("|---|---:|---:|---:|")
    for name, new, old in cases:
        reps = 1 if "dicts" in name else (20 if "JSON" in name else 20_000)
        t_new = _time(_repeat(new, reps), ns.rounds) / reps
        t_old = _time(_repeat(old, reps), ns.rounds) / reps
        unit, k = ("ms", 1e3) if t_old > 1e-3 else ("us", 1e6)
        print(f"| {name} | {t_new * k:,.2f} {unit} | {t_old * k:,.2f} {unit} | {t_old / t_new:,.1f}x |")


if __name__ == "__main__":
    main()
