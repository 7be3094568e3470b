"""Closing figures of notebook 02, from one run: all_reduce bus bandwidth against the
point-to-point bandwidth between two ranks, and notebook 02's hand-written ring all-reduce
(helpers.taught) against dist.all_reduce, at the same message size. Prints; asserts nothing
about speed.

    .venv/bin/python benchmarks/collectives.py            # 32 MiB, ranks as start_cluster picks
    COURSE_WORLD_SIZE=2 .venv/bin/python benchmarks/collectives.py --mib 8
"""

from __future__ import annotations

import argparse

from helpers import start_cluster
from helpers.text import format_bytes
from helpers.timing import algbw, busbw


def measure(nbytes: int, warmup: int, repeats: int) -> dict[str, float]:
    """On every rank: median times (slowest rank) of send/recv 0->1, all_reduce and the ring."""
    import torch
    import torch.distributed as dist

    from helpers.cluster.engine import whereami
    from helpers.taught import ring_all_reduce, send_0_to_1
    from helpers.timing import time_on_all_ranks

    _, _, device = whereami()
    x = torch.ones(nbytes // 4, device=device)

    def timed(fn):
        return time_on_all_ranks(fn, device, warmup=warmup, repeats=repeats)

    return {"send/recv": timed(lambda: send_0_to_1(x)),
            "all_reduce": timed(lambda: dist.all_reduce(x)),
            "ring": timed(lambda: ring_all_reduce(x))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="message size in MiB (default 32)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats (default 10)")
    args = parser.parse_args()
    nbytes = args.mib * 2**20
    with start_cluster(activate=False) as cluster:
        n = cluster.world_size
        if n < 2:
            raise SystemExit("needs 2 ranks or more")
        times = cluster.view.apply_sync(measure, nbytes, 3, args.repeats)[0]
        p2p = algbw(nbytes, times["send/recv"])
        bus = busbw("all_reduce", nbytes, times["all_reduce"], n)
        print(f"{n} ranks, {cluster.backend}, devices {sorted({r.device for r in cluster.ranks})}, "
              f"message {format_bytes(nbytes)}, median of {args.repeats} repeats (slowest rank)")
        print(f"all_reduce bus bandwidth    {bus / 1e6:9.1f} MB/s   "
              f"({times['all_reduce'] * 1e3:.2f} ms, bus factor 2(n-1)/n = {2 * (n - 1) / n:.2f})")
        print(f"send/recv 0->1 bandwidth    {p2p / 1e6:9.1f} MB/s   "
              f"({times['send/recv'] * 1e3:.2f} ms)")
        print(f"ratio all_reduce bus / send/recv: {bus / p2p:.2f}")
        print(f"ring all-reduce by hand {times['ring'] * 1e3:.2f} ms vs dist.all_reduce "
              f"{times['all_reduce'] * 1e3:.2f} ms: {times['ring'] / times['all_reduce']:.2f}x")


if __name__ == "__main__":
    main()
