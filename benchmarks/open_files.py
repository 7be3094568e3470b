"""Open files and threads of every engine before and after many exercise checks in a row, as a
learner who checks answers all afternoon in one kernel session makes them. Each check forms
and destroys process groups on every rank; what they leave behind adds up (an ordinary user
may open 1024 files, a Mac 256). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/open_files.py [--ranks 4] [--checks 200]

tests/test_exercises.py checks the same with 5 checks in make test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from answers import RIGHT  # tests/answers.py, found through the line above

from helpers import checks, start_cluster


def counts(cluster) -> list[tuple[int, int]]:
    """(open files, threads) of each rank's engine, in rank order."""
    return [(psutil.Process(r.pid).num_fds(), psutil.Process(r.pid).num_threads())
            for r in cluster.ranks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--checks", type=int, default=200)
    args = parser.parse_args()
    kernel_side = psutil.Process()
    with start_cluster(n=args.ranks, activate=False) as cluster:
        cluster.px(RIGHT["count_ranks"])
        before, here_before = counts(cluster), kernel_side.num_fds()
        started = time.monotonic()
        for i in range(args.checks):
            with contextlib.redirect_stdout(io.StringIO()):
                checks.check(cluster, checks.COUNT_RANKS, seed=1000 + i)
        took = time.monotonic() - started
        after, here_after = counts(cluster), kernel_side.num_fds()
    print(f"{args.checks} checks of count_ranks at {args.ranks} ranks ({took:.0f} s)")
    print("rank  open files before -> after   threads before -> after")
    for rank, ((f0, t0), (f1, t1)) in enumerate(zip(before, after)):
        print(f"{rank:>4}  {f0:>10} -> {f1:<10}       {t0:>7} -> {t1}")
    print(f"notebook side (this process): open files {here_before} -> {here_after}")


if __name__ == "__main__":
    main()
