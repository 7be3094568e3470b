"""The cluster's lifecycle on real engines: start, re-form, restart, stop, bad input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from system import alive, listening

from helpers import Cluster, ClusterConfigError, ClusterError, RankError, start_cluster
from helpers.cluster.watchdog import course_processes


def _listening_addresses(pids: list[int]) -> list[str]:
    """Addresses on which the given processes listen for TCP connections (each in its own
    network namespace: the ranks have one of their own)."""
    return [address for _, address, _ in listening(pids)]


def _on_ranks(cluster, expr: str) -> list:
    """expr evaluated on every rank, in rank order (sent as text: engines cannot import tests)."""
    cluster.view.execute(f"_value = {expr}")
    return cluster.view["_value"]


def _ring_sum(cluster) -> list[float]:
    cluster.view.execute("t = torch.tensor([rank + 1.0]); dist.all_reduce(t); total = t.item()")
    return cluster.view["total"]


def test_cluster_lifecycle_on_two_ranks():
    with start_cluster(n=2, activate=False) as cluster:
        assert cluster.backend == "gloo" and cluster.world_size == 2
        assert cluster.view["rank"] == [0, 1]
        assert _on_ranks(cluster, "str(device)") == ["cpu", "cpu"]
        assert _ring_sum(cluster) == [3.0, 3.0]
        # every socket the course listens on is on loopback
        addresses = _listening_addresses(cluster.pids())
        assert addresses and set(addresses) <= {"127.0.0.1", "::1"}, addresses
        gloo_env = _on_ranks(cluster, "__import__('os').environ.get('GLOO_SOCKET_IFNAME')")
        assert set(gloo_env) <= {"lo", "lo0"}, gloo_env
        # threads are limited so that the ranks do not oversubscribe the cores
        threads = _on_ranks(cluster, "torch.get_num_threads()")
        assert all(t * 2 <= max(2, os.cpu_count()) for t in threads), threads
        # re-forming the group on warm engines
        gen = cluster.generation
        cluster.form_group()
        assert cluster.generation == gen + 1 and _ring_sum(cluster) == [3.0, 3.0]
        # restarting gives fresh processes, same ranks
        old = [r.pid for r in cluster.ranks]
        cluster.restart()
        assert not set(old) & {r.pid for r in cluster.ranks}
        assert cluster.view["rank"] == [0, 1] and _ring_sum(cluster) == [3.0, 3.0]
        pids, private_dir = cluster.pids(), cluster.dir
    assert not alive(pids)
    assert not private_dir.exists()


def test_starting_again_replaces_the_old_cluster():
    first = start_cluster(n=1, activate=False)
    first_pids = first.pids()
    second = start_cluster(n=1, activate=False)
    try:
        assert not alive(first_pids)
        assert second.view["rank"] == [0]
    finally:
        second.stop()


def test_world_size_from_environment(monkeypatch):
    monkeypatch.setenv("COURSE_WORLD_SIZE", "3")
    with start_cluster(activate=False) as cluster:
        assert cluster.world_size == 3 and cluster.view["world_size"] == [3, 3, 3]


@pytest.mark.parametrize("kwargs, match", [
    ({"n": 0}, "at least 1 rank"),
    ({"n": 2, "backend": "nccl"}, "needs GPUs"),
    ({"n": 2, "backend": "mpi"}, "one of"),
])
def test_bad_input_is_refused_before_anything_starts(kwargs, match, own_processes):
    before = own_processes()
    with pytest.raises(ClusterConfigError, match=match):
        start_cluster(activate=False, **kwargs)
    assert len(own_processes()) == len(before)


def test_a_cluster_that_does_not_come_up_in_time_says_why(own_processes):
    before = {p.pid for p in own_processes()}  # the unit tests' shared clusters, if started
    with pytest.raises(ClusterError, match=r"only 0 of 2 engines registered within 0.01 s") as err:
        start_cluster(n=2, start_timeout=0.01, activate=False)
    assert "still loading torch" in str(err.value) and "COURSE_WORLD_SIZE" in str(err.value)
    left = [p for p in own_processes() if p.pid not in before]
    assert left == [], "a cluster that failed to start left processes behind"


def test_a_temporary_folder_too_deep_for_a_socket_says_what_to_do(tmp_path, monkeypatch,
                                                                  own_processes):
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # a socket's path may hold at most 107 bytes
    deep.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    before = {p.pid for p in own_processes()}
    with pytest.raises(ClusterError, match=r"longer than the 107 bytes .* set TMPDIR"):
        start_cluster(n=1, activate=False)
    assert [p for p in own_processes() if p.pid not in before] == []
    assert list(deep.iterdir()) == [], "the cluster's folder was left behind"


def test_engines_that_exit_at_start_are_named_with_their_logs(monkeypatch, own_processes):
    # a fault planted in the engines' command line: each engine exits as soon as it starts
    monkeypatch.setattr(Cluster, "engine_argv", lambda self: ["--no-such-option=1"])
    before = {p.pid for p in own_processes()}
    with pytest.raises(ClusterError, match=r"engine process\(es\) exited while the cluster") as e:
        start_cluster(n=2, activate=False)
    assert re.search(r"engine process \d \(pid \d+\) exited; its log ends:", str(e.value))
    assert "no-such-option" in str(e.value), "the engine's own complaint is shown"
    left = [p for p in own_processes() if p.pid not in before]
    assert left == [], "a cluster that failed to start left processes behind"


KERNEL = textwrap.dedent("""
    from helpers import start_cluster
    cluster = start_cluster(n=2, activate=False)
    print(cluster.dir, flush=True)
    import time
    time.sleep(600)
""")


def test_cluster_ends_when_its_kernel_is_sigkilled():
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
    try:
        cluster_dir = kernel.stdout.readline().strip()
        assert cluster_dir, "the stand-in kernel did not start its cluster"
        assert len(course_processes(cluster_dir)) >= 3
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(5)
        killed_at = time.monotonic()
        while (course_processes(cluster_dir) or os.path.exists(cluster_dir)) and (
            time.monotonic() - killed_at < 15
        ):
            time.sleep(0.2)
        assert course_processes(cluster_dir) == [], "engines outlived their kernel by 15 s"
        print(f"cluster gone {time.monotonic() - killed_at:.1f} s after SIGKILL of its kernel")
        assert not os.path.exists(cluster_dir)
    finally:
        if kernel.poll() is None:
            kernel.kill()


def test_failures_are_reported_by_rank_never_as_a_hang():
    with start_cluster(n=3, activate=False, cell_timeout=4) as cluster:
        with pytest.raises(RankError, match=r"failed on rank\(s\) \[1\]") as err:
            cluster.px("assert rank != 1, f'rank {rank}: planted'")
        assert err.value.failed == {1: "AssertionError: rank 1: planted"}
        # a rank that never answers: the wait ends, naming it; Ctrl-C reaches its engine
        with pytest.raises(RankError, match=r"rank\(s\) \[2\] did not answer within 4 s"):
            cluster.px("import time\nif rank == 2: time.sleep(60)")
        cluster.interrupt([2])
        cluster.px("x = 1", timeout=10)
        # a rank that dies in the middle of a collective: named within seconds
        killer = threading.Timer(1.0, os.kill, (cluster.ranks[1].pid, signal.SIGKILL))
        killer.start()
        start = time.monotonic()
        with pytest.raises(RankError, match=r"rank\(s\) \[1\] died") as err:
            cluster.px("for _ in range(600):\n    dist.all_reduce(torch.ones(1)); time.sleep(0.05)",
                       timeout=120)
        # named when it died: a wait that ran to the cell's timeout would take all of it
        assert time.monotonic() - start < 120
        # the survivors report their own errors, or are named as still waiting for the dead rank
        assert set(err.value.failed) | set(err.value.silent) == {0, 2}, err.value
        with pytest.raises(RankError, match=r"rank\(s\) \[1\] died"):
            cluster.px("x = 2")
        assert cluster.stacks([1]) == {1: "process gone"}
        assert cluster.where([1]) == {1: "process gone"}
        with pytest.raises(ClusterError, match="restart"):
            cluster.form_group()
        cluster.restart()
        assert _ring_sum(cluster) == [6.0, 6.0, 6.0]


def test_a_dead_controller_is_named_and_restart_brings_a_new_one():
    with start_cluster(n=2, activate=False, cell_timeout=20) as cluster:
        old_controller = list(cluster._controller_pids)
        for pid in old_controller:  # the hub and its schedulers: the whole controller
            os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RankError, match="the controller is gone") as err:
            cluster.px("x = 1")
        # named at once: a wait that ran to the cell's timeout (20 s) would take all of it
        assert time.monotonic() - start < 20 and "cluster.restart()" in str(err.value)
        assert "did not answer" not in str(err.value), "a dead controller is not a hang"
        with pytest.raises(ClusterError, match="the controller is gone"):
            cluster.form_group()
        cluster.restart()
        assert not set(old_controller) & set(cluster._controller_pids)
        assert _ring_sum(cluster) == [3.0, 3.0]
        pids = cluster.pids()
    assert not alive(pids)
