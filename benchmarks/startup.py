"""How long it takes to get a working process group: the course's cluster beside torchrun.

Prints figures and ratios, asserts nothing about speed.
Run: .venv/bin/python benchmarks/startup.py [N]
  - start_cluster(): from nothing to N ranks in a process group, plus one all_reduce, in a
    process that has imported torch already (as every notebook's setup cell has);
  - torchrun: N processes, gloo, one all_reduce, exit; its rendezvous and the process group
    meet through files, so nothing listens beyond the loopback interface;
  - cluster.form_group(): a new process group on warm engines, plus one all_reduce;
  - cluster.restart(): fresh engines and a new process group, plus one all_reduce;
  - cluster.stop(): until every process of the cluster is gone.
The two ways of starting alternate (cluster first in odd runs, torchrun first in even ones),
so that both see the same state of the machine; ratios are taken of the medians.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("IPP_NONINTERACTIVE", "1")

import torch  # noqa: F401 - imported before timing, as a notebook's setup cell does

from helpers import start_cluster
from helpers.cluster.topology import loopback_interface
from helpers.jobs.launch import run_watched, torchrun_command

SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    world = int(os.environ["WORLD_SIZE"])
    store = dist.FileStore(sys.argv[1], world)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]), world_size=world)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    dist.destroy_process_group()
""")
CHECK = "t = torch.ones(1); dist.all_reduce(t); assert t.item() == world_size"


def torchrun_seconds(n: int, script: Path) -> float:
    """Wall time of one torchrun of the script, rendezvous through files on loopback only."""
    work = Path(tempfile.mkdtemp(dir=script.parent))
    loopback = loopback_interface([name for _, name in socket.if_nameindex()])
    env = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", GLOO_SOCKET_IFNAME=loopback,
               OMP_NUM_THREADS="1")
    cmd = torchrun_command() + [
        "--nnodes=1", f"--nproc-per-node={n}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={work}/rendezvous", "--rdzv-conf=store_type=file",
        str(script), str(work / "store")]
    start = time.perf_counter()
    run = run_watched(cmd, env=env, timeout=120)
    seconds = time.perf_counter() - start
    if run.returncode != 0 or not run.listening <= {"127.0.0.1", "::1"}:
        raise RuntimeError(f"torchrun failed or listened on {run.listening}:\n{run.output[-2000:]}")
    return seconds


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cluster_seconds(n: int, rows: dict[str, list[float]]) -> None:
    """One life of a cluster: start, re-form, restart, stop; each step timed into rows."""
    start = time.perf_counter()
    cluster = start_cluster(n=n, activate=False)
    cluster.px(CHECK)
    rows["start_cluster() + all_reduce"].append(time.perf_counter() - start)
    rows["form_group() on warm engines + all_reduce"].append(
        timed(lambda: (cluster.form_group(), cluster.px(CHECK))))
    rows["restart() + all_reduce"].append(timed(lambda: (cluster.restart(), cluster.px(CHECK))))
    rows["stop()"].append(timed(cluster.stop))


def main(n: int = 4, repeats: int = 5) -> None:
    script = Path(tempfile.mkdtemp()) / "one_all_reduce.py"
    script.write_text(SCRIPT)
    rows: dict[str, list[float]] = {
        "start_cluster() + all_reduce": [], "torchrun + all_reduce": [],
        "form_group() on warm engines + all_reduce": [], "restart() + all_reduce": [],
        "stop()": []}
    for i in range(repeats):
        if i % 2:
            rows["torchrun + all_reduce"].append(torchrun_seconds(n, script))
            cluster_seconds(n, rows)
        else:
            cluster_seconds(n, rows)
            rows["torchrun + all_reduce"].append(torchrun_seconds(n, script))
    medians = {name: statistics.median(times) for name, times in rows.items()}
    torchrun = medians["torchrun + all_reduce"]
    print(f"{n} ranks, gloo, {os.cpu_count()} cores; "
          f"median of {repeats} alternating runs (min-max)")
    for name, times in rows.items():
        ratio = "" if name in ("torchrun + all_reduce", "stop()") else (
            f"   {medians[name] / torchrun:.2f}x torchrun")
        print(f"  {name:<44} {medians[name]:6.2f} s  ({min(times):.2f}-{max(times):.2f}){ratio}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
