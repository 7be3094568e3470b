"""How long it takes to get a working process group: the course's cluster beside torchrun.

Prints figures, asserts nothing about speed. Run: .venv/bin/python benchmarks/startup.py [N]
  - start_cluster(): from nothing to N ranks in a process group, plus one all_reduce;
  - torchrun: N processes, gloo, rendezvous on 127.0.0.1, one all_reduce, exit;
  - cluster.form_group(): a new process group on warm engines, plus one all_reduce;
  - cluster.restart(): fresh engines and a new process group, plus one all_reduce.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("IPP_NONINTERACTIVE", "1")

from helpers import start_cluster  # noqa: E402

SCRIPT = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    dist.destroy_process_group()
""")
CHECK = "t = torch.ones(1); dist.all_reduce(t); assert t.item() == world_size"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_seconds(n: int, script: Path) -> float:
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [str(torchrun), f"--nproc-per-node={n}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(script)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, timeout=120, capture_output=True)
    return time.perf_counter() - start


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(n: int = 4, repeats: int = 3) -> None:
    script = Path(tempfile.mkdtemp()) / "one_all_reduce.py"
    script.write_text(SCRIPT)
    rows = {"start_cluster() + all_reduce": [], "torchrun + all_reduce": [],
            "form_group() on warm engines + all_reduce": [], "restart() + all_reduce": []}
    for _ in range(repeats):
        start = time.perf_counter()
        cluster = start_cluster(n=n, activate=False)
        cluster.px(CHECK)
        rows["start_cluster() + all_reduce"].append(time.perf_counter() - start)
        rows["form_group() on warm engines + all_reduce"].append(
            timed(lambda c=cluster: (c.form_group(), c.px(CHECK))))
        rows["restart() + all_reduce"].append(timed(lambda c=cluster: (c.restart(), c.px(CHECK))))
        cluster.stop()
        rows["torchrun + all_reduce"].append(torchrun_seconds(n, script))
    print(f"{n} ranks, gloo, {os.cpu_count()} cores; median of {repeats} runs (min-max)")
    for name, times in rows.items():
        print(f"  {name:<44} {statistics.median(times):6.2f} s  "
              f"({min(times):.2f}-{max(times):.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
