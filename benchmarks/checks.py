"""How long an exercise check takes, and how much of it is forming process groups.

Prints figures and ratios, asserts nothing about speed.
Run: .venv/bin/python benchmarks/checks.py [N] [REPEATS]
  - a right answer (notebook 00's count_ranks, notebook 01's ring_sum): a whole check, every
    case run on N ranks and again on N - 1;
  - a wrong answer (ring_sum that never adds what it receives): the check stops at the first
    case;
  - one new process group on the same ranks (gloo, made and destroyed), the unit of a check's
    fixed cost: a check forms the learner's group for each run, and on one rank fewer another.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("IPP_NONINTERACTIVE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from answers import RIGHT  # the tests' worked answers

from helpers import checks, start_cluster

WRONG_RING_SUM = RIGHT["ring_sum"].replace("        total += incoming\n", "")  # its own value only
GROUP = """
import time, datetime
t0 = time.perf_counter()
_g = dist.new_group(list(range(world_size)), timeout=datetime.timedelta(seconds=5), backend="gloo")
dist.destroy_process_group(_g)
group_seconds = time.perf_counter() - t0
"""


def timed(run, repeats: int) -> float:
    """Median seconds of run() over repeats."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def quietly(fn, *args, **kwargs):
    """Call fn with its printed lines dropped; an AssertionError (a wrong answer) is kept quiet."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            fn(*args, **kwargs)
        except AssertionError:
            pass


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    with start_cluster(n) as cluster:
        cluster.px(RIGHT["count_ranks"] + "\n" + RIGHT["ring_sum"])
        quietly(checks.check, cluster, checks.COUNT_RANKS)  # warm: imports, the first groups
        rows = []
        for name, exercise in (("count_ranks, right", checks.COUNT_RANKS),
                               ("ring_sum, right", checks.RING_SUM)):
            rows.append((name, exercise.cases,
                         timed(lambda e=exercise: quietly(checks.check, cluster, e), repeats)))
        cluster.px(WRONG_RING_SUM)
        rows.append(("ring_sum, wrong", 1,
                     timed(lambda: quietly(checks.check, cluster, checks.RING_SUM), repeats)))
        groups = []
        for _ in range(repeats):
            cluster.px(GROUP)
            groups.append(max(cluster.view.pull("group_seconds", block=True)))
        group = statistics.median(groups)
    print(f"{n} ranks, median of {repeats}:")
    print(f"  one new gloo group (made and destroyed): {1000 * group:6.1f} ms")
    for name, cases, seconds in rows:
        print(f"  check, {name:<20} {1000 * seconds:6.0f} ms  ({cases} case(s): "
              f"{seconds / cases / group:4.1f} groups' time per case)")


if __name__ == "__main__":
    main()
