"""Memory one episode's information pool holds after N MB of distinct tool-result text. Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_pool_memory.py [MB]   (default 38, as in tracker issue 19)

Results are dicts with an id, a body of 20-250 random words and five short rows, fed to a
fresh TrackedState one by one and dropped; tracemalloc measures what the state still holds.
Random words are the worst case (every word is a new pool entry).
"""

from __future__ import annotations

import random
import string
import sys
import tracemalloc

from prefixmon import TrackedState

mb = float(sys.argv[1]) if len(sys.argv) > 1 else 38
rng = random.Random(0)


def words(n: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12))) for _ in range(n))


tracemalloc.start()
state = TrackedState()
base = tracemalloc.get_traced_memory()[0]
seen = 0
i = 0
while seen < mb * 1e6:
    result = {"id": f"r-{i}", "body": words(rng.randint(20, 250)), "rows": [f"row {i}-{j} {words(3)}" for j in range(5)]}
    seen += len(result["body"]) + sum(len(r) for r in result["rows"]) + len(result["id"])
    state.ingest(result)
    i += 1
held = tracemalloc.get_traced_memory()[0] - base
print(f"seen {seen / 1e6:.1f} MB of text in {i} results; pool holds {held / 1e6:.1f} MB")
