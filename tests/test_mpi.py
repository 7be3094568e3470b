"""Engines started by mpiexec (launcher="mpi", COURSE_LAUNCHER=mpi) on this machine.

Open MPI's mpiexec listens on every interface it can see; the course runs it in a network
namespace of its own, where the only interface is that namespace's loopback, and its engines
reach the controller through Unix sockets. Needs Open MPI, mpi4py and `unshare`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time

import psutil
import pytest
from system import alive, listening_outside_loopback, need, net_namespace

from helpers.cluster import ClusterError, start_cluster
from helpers.cluster.topology import own_network

ALL_REDUCE = ("t = torch.ones(1, device=device); dist.all_reduce(t); "
              "assert t.item() == world_size, f'rank {rank}: all_reduce gave {t.item()}'")


def _namespaces_work() -> bool:
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    probe = subprocess.run(["unshare", *own_network(os.geteuid()), "true"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def mpi_ready():
    need(shutil.which("mpiexec"), "no mpiexec (Debian: apt-get install openmpi-bin)")
    need(importlib.util.find_spec("mpi4py"), "no mpi4py (pip install -e '.[mpi]')")
    need(_namespaces_work(), "no network namespace can be made here (unshare --net)")


def test_three_ranks_under_mpiexec_all_reduce_interrupt_restart_and_stop(mpi_ready):
    cluster = start_cluster(n=3, backend="gloo", launcher="mpi", activate=False)
    try:
        assert [r.rank for r in cluster.ranks] == [0, 1, 2]
        assert [r.local_rank for r in cluster.ranks] == [0, 1, 2]  # one host
        cluster.px(ALL_REDUCE)
        for r in cluster.ranks:  # each engine is a child of mpiexec...
            parents = [p.name() for p in psutil.Process(r.pid).parents()]
            assert "mpiexec" in parents, f"rank {r.rank}: started by {parents}"
            # ...in a network namespace other than this machine's
            assert net_namespace(r.pid) != net_namespace(os.getpid()), f"rank {r.rank}"
        here = net_namespace(os.getpid())
        outside = listening_outside_loopback(cluster.pids())
        assert not outside, f"cluster processes listen outside loopback here ({here}): {outside}"
        stuck = cluster.view.execute("import time; time.sleep(60)", block=False)
        time.sleep(0.5)
        cluster.interrupt()  # SIGINT by pid, as with forked engines
        with pytest.raises(Exception, match="KeyboardInterrupt"):
            stuck.get(10)
        cluster.px(ALL_REDUCE)
        before = [r.pid for r in cluster.ranks]
        cluster.restart()
        assert not set(before) & {r.pid for r in cluster.ranks}, "restart kept an engine"
        cluster.px(ALL_REDUCE)
        started = cluster.pids()
    finally:
        cluster.stop()
    assert not alive(started), f"processes left after stop(): {alive(started)}"


def test_no_mpiexec_is_a_clear_error_and_leaves_nothing(mpi_ready, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ClusterError, match="needs mpiexec on PATH .*apt-get install openmpi-bin"):
        start_cluster(n=2, backend="gloo", launcher="mpi", activate=False)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left after the failed start: {left}"
