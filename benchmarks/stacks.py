"""How long it takes to see where every rank is: Cluster.stacks() while ranks hang.

Prints figures, asserts nothing about speed. N ranks (default 8) each block in an all_reduce
that one rank never joins; the stacks of all of them are then taken from outside, with
py-spy (Python frames, then with the C++ frames too) and with the engines' faulthandler.

    .venv/bin/python benchmarks/stacks.py [N]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("IPP_NONINTERACTIVE", "1")

from helpers import start_cluster
from helpers.cluster import stacks

HANG = "t = torch.ones(1)\nif rank != 0:\n    dist.all_reduce(t)"


def main(n: int = 8) -> None:
    with start_cluster(n=n, activate=False, timeout=60) as cluster:
        stuck = cluster.view.execute(HANG, block=False)
        time.sleep(1.0)
        rows = {}
        for label, take in [("py-spy", lambda: cluster.stacks()),
                            ("py-spy, native frames", lambda: cluster.stacks(native=True)),
                            ("faulthandler", lambda: _faulthandler_only(cluster))]:
            start = time.perf_counter()
            found = take()
            rows[label] = (time.perf_counter() - start, found)
        where = cluster.where()
        assert not stuck.ready(), "the ranks were expected to hang until the cluster stops"
    print(f"{n} ranks, {os.cpu_count()} cores: seconds to take every rank's stack")
    for label, (seconds, found) in rows.items():
        got = sum("MainThread" in t or "File " in t for t in found.values())
        print(f"  {label:<24} {seconds:5.2f} s  ({got}/{n} stacks)")
    print(f"  rank 1 is {where[1]}")


def _faulthandler_only(cluster) -> dict[int, str]:
    return {r.rank: stacks.with_faulthandler(r.pid, cluster.dir) for r in cluster.ranks}


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
