"""How long one %%px cell takes when the cell itself does nothing: the cost of the round trip.

Prints figures, asserts nothing about speed. Three ways of running `pass` on every rank,
interleaved so that all three see the same state of the machine, median of each:
  - the %%px magic, as a notebook cell runs it (in an IPython shell, outputs displayed);
  - cluster.px(code), the same from ordinary Python (notebooks 05 and 06);
  - ipyparallel's own DirectView.execute(block=True), for reference: the floor under both.

    .venv/bin/python benchmarks/px_roundtrip.py [N] [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("IPP_NONINTERACTIVE", "1")

from IPython.testing.globalipapp import start_ipython

from helpers import start_cluster
from helpers.cluster import magics


def main(n: int = 4, rounds: int = 300) -> None:
    shell = start_ipython()
    with start_cluster(n=n, activate=False) as cluster:
        shell.magics_manager.register(magics.CourseMagics(shell, cluster.view, cluster))
        ways = {"%%px magic": lambda: shell.run_cell_magic("px", "", "pass"),
                "cluster.px": lambda: cluster.px("pass"),
                "ipyparallel execute (floor)": lambda: cluster.view.execute("pass", block=True)}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(20):  # warm up
            for fn in ways.values():
                fn()
        for _ in range(rounds):
            for name, fn in ways.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    print(f"{n} ranks, {os.cpu_count()} cores; median (p10-p90) of {rounds} interleaved rounds")
    for name, ts in times.items():
        ts = sorted(ts)
        print(f"  {name:<28} {statistics.median(ts) * 1e3:6.2f} ms  "
              f"({ts[len(ts) // 10] * 1e3:.2f}-{ts[len(ts) * 9 // 10] * 1e3:.2f})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
