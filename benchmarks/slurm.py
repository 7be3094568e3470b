"""The course's cluster as a Slurm job beside the local one: time to a working 4-rank group, and
all_reduce bus bandwidth across two nodes against within one. Prints figures and ratios,
asserts nothing about speed.

    make cluster-up && source .cluster/env && .venv/bin/python benchmarks/slurm.py

(or on a real Slurm cluster, from a login node, with COURSE_CONTROLLER_IP set). Measured:
  - start: start_cluster() to a 4-rank group plus one all_reduce, local (forked engines) and
    Slurm (2 nodes x 2 ranks), alternating run by run; restart() the same way;
  - bandwidth: all_reduce of --mib MiB on 4 ranks, as a Slurm job on 2 nodes (gloo over the
    nodes' network) and on 1 node (gloo inside one node), and on the local cluster.
On make cluster-up's cluster the "nodes" are namespaces of one machine: the network between
them is a bridge in memory, and all ranks share the same cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("IPP_NONINTERACTIVE", "1")

from helpers import start_cluster
from helpers.text import format_bytes
from helpers.timing import busbw

ALL_REDUCE = "t = torch.ones(1, device=device); dist.all_reduce(t); assert t.item() == world_size"


def all_reduce_seconds(nbytes: int, repeats: int) -> float:
    """On every rank: median all_reduce time of the slowest rank."""
    import torch
    import torch.distributed as dist

    from helpers.cluster.engine import whereami
    from helpers.timing import time_on_all_ranks

    _, _, device = whereami()
    x = torch.ones(nbytes // 4, device=device)
    return time_on_all_ranks(lambda: dist.all_reduce(x), device, warmup=3, repeats=repeats)


def timed_start(launcher: str, nodes: int) -> tuple[float, float]:
    """Seconds to start (plus one all_reduce) and to restart (plus one all_reduce)."""
    t0 = time.perf_counter()
    cluster = start_cluster(4, backend="gloo", launcher=launcher, nodes=nodes, activate=False)
    try:
        cluster.px(ALL_REDUCE)
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        cluster.restart()
        cluster.px(ALL_REDUCE)
        return started, time.perf_counter() - t0
    finally:
        cluster.stop()


def bandwidth(launcher: str, nodes: int, nbytes: int, repeats: int) -> tuple[float, list[str]]:
    """all_reduce bus bandwidth (bytes/s) on 4 ranks, and the ranks' hosts."""
    with start_cluster(4, backend="gloo", launcher=launcher, nodes=nodes,
                       activate=False) as cluster:
        seconds = cluster.view.apply_sync(all_reduce_seconds, nbytes, repeats)[0]
        return busbw("all_reduce", nbytes, seconds, 4), [r.host for r in cluster.ranks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="start-ups of each kind (default 3)")
    parser.add_argument("--mib", type=int, default=32, help="all_reduce size in MiB (default 32)")
    parser.add_argument("--repeats", type=int, default=10, help="timed all_reduces (default 10)")
    args = parser.parse_args()
    import torch  # noqa: F401 - imported before timing, as a notebook's setup cell does

    kinds = {"local": ("local", 1), "slurm, 2 nodes": ("slurm", 2)}
    starts: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for run in range(args.runs):
        for kind in (kinds if run % 2 == 0 else reversed(kinds)):
            starts[kind].append(timed_start(*kinds[kind]))
    print(f"4 ranks, gloo; median of {args.runs} runs, alternating")
    print(f"{'':16}{'start (s)':>12}{'restart (s)':>13}")
    med = {k: [statistics.median(x[i] for x in v) for i in (0, 1)] for k, v in starts.items()}
    for kind, (start, restart) in med.items():
        print(f"{kind:16}{start:12.2f}{restart:13.2f}")
    local, remote = med["local"], med["slurm, 2 nodes"]
    print(f"slurm / local: start {remote[0] / local[0]:.1f}x, restart {remote[1] / local[1]:.1f}x")

    nbytes = args.mib * 2**20
    print(f"\nall_reduce of {format_bytes(nbytes)}, 4 ranks, median of {args.repeats} "
          "(slowest rank)")
    found = {}
    for kind, (launcher, nodes) in {"slurm, 2 nodes": ("slurm", 2),
                                    "slurm, 1 node": ("slurm", 1),
                                    "local": ("local", 1)}.items():
        found[kind], hosts = bandwidth(launcher, nodes, nbytes, args.repeats)
        print(f"{kind:16}{found[kind] / 1e6:10.1f} MB/s bus bandwidth   hosts {hosts}")
    print(f"across 2 nodes / within 1 node: "
          f"{found['slurm, 2 nodes'] / found['slurm, 1 node']:.2f}")


if __name__ == "__main__":
    main()
