"""Engines as a Slurm job spread over two nodes (launcher="slurm", COURSE_LAUNCHER=slurm), on the
real Slurm of `make cluster-up`: munge, slurmctld and two slurmd, each node a network and UTS
namespace of this machine with its own hostname and address.

The tests use the cluster if it is up (`source .cluster/env` is not needed: they read it), or
bring it up and down themselves when they run as root with Slurm and munge installed. On a
learner's laptop they skip with one line; under COURSE_REQUIRE_SYSTEM=1 (CI) they must run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from system import alive, listening_outside_loopback, need, net_namespace

from helpers import calltrace
from helpers.cluster import ClusterError, start_cluster
from helpers.cluster.launchers import slurm
from helpers.cluster.px import RankError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "slurm-cluster"
ENV_FILE = ROOT / ".cluster" / "env"
ALL_REDUCE = ("t = torch.ones(1, device=device) * (rank + 1); dist.all_reduce(t); "
              "assert t.item() == world_size * (world_size + 1) / 2, "
              "f'rank {rank}: all_reduce gave {t.item()}'")


def _cluster_up() -> bool:
    return ENV_FILE.exists() and subprocess.run(
        ["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0


def _can_bring_up() -> str | None:
    """Why this machine cannot run make cluster-up, or None."""
    if os.geteuid() != 0:
        return "no Slurm cluster is up and bringing one up needs root (sudo make cluster-up)"
    missing = [c for c in ("slurmctld", "slurmd", "munged", "ip", "nsenter", "unshare")
               if shutil.which(c) is None]
    if missing:
        return (f"no Slurm cluster is up and {', '.join(missing)} missing (make cluster-up "
                "installs them as root)")
    return None


def _read_env() -> dict[str, str]:
    out = subprocess.run(["bash", "-c", f"source {ENV_FILE} && env -0"], capture_output=True,
                         check=True).stdout.decode()
    return dict(line.split("=", 1) for line in out.split("\0") if "=" in line)


@pytest.fixture(scope="module")
def slurm_env():
    """os.environ with .cluster/env applied (Slurm's commands on PATH, the controller's
    address); the cluster is brought up first, and down afterwards, if it was not up."""
    started = False
    if not _cluster_up():
        why = _can_bring_up()
        need(why is None, why or "")
        done = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"make cluster-up failed:\n{done.stdout}{done.stderr}"
        started = True
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in _read_env().items()
                       if k in ("PATH", "SLURM_CONF") or k.startswith("COURSE_")})
    try:
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if started:
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, timeout=120)


def _queue() -> list[str]:
    return slurm.run(["squeue", "-h", "-o", "%i %T"]).split()


def test_four_ranks_on_two_nodes(slurm_env):
    t0 = time.perf_counter()
    cluster = start_cluster(n=4, nodes=2, backend="gloo", launcher="slurm", activate=False,
                            sbatch=["--cpus-per-task=2"])  # each node: 4 CPUs for its 2 ranks
    started_in = time.perf_counter() - t0
    try:
        jobs = cluster.launcher.jobs
        assert jobs and jobs[0] in _queue(), f"no job of {jobs} in squeue"
        hosts = [r.host for r in cluster.ranks]
        assert hosts == ["node1", "node1", "node2", "node2"], f"ranks on hosts {hosts}"
        assert [r.local_rank for r in cluster.ranks] == [0, 1, 0, 1]
        assert all(r.remote for r in cluster.ranks)
        cluster.px(ALL_REDUCE)
        # each rank's backend uses its interface on the nodes' network, found from the route
        interfaces = cluster.view.apply_sync(os.getenv, "GLOO_SOCKET_IFNAME")
        assert interfaces == ["eth0"] * 4, f"GLOO_SOCKET_IFNAME by engine: {interfaces}"
        # each rank's CPU threads: its node's share of the job's CPUs (4 on each node here, for
        # 2 ranks), not a share of the CPUs of the machine the notebook runs on
        cpus = cluster.view.apply_sync(os.getenv, "SLURM_CPUS_ON_NODE")
        threads = cluster.view.apply_sync(torch.get_num_threads)
        assert cpus == ["4"] * 4 and threads == [2] * 4, f"threads {threads}, node CPUs {cpus}"
        # the controller runs in the head's namespace; nothing of the course listens outside
        # loopback in this machine's own namespace
        here = net_namespace(os.getpid())
        controller = cluster._controller_pids[0]
        assert net_namespace(controller) != here, "the controller runs in this machine's namespace"
        outside = listening_outside_loopback(cluster.pids())
        assert not outside, f"cluster processes listen outside loopback: {outside}"

        # the call record of every rank, fetched from the nodes
        records = calltrace.fetch(cluster)
        assert all(any(c["op"] == "all_reduce" for c in records[r]) for r in range(4)), records
        # a %%px cell that outlives its timeout names the silent ranks and where they are
        with pytest.raises(RankError, match=r"did not answer within 2 s") as err:
            cluster.px("import time; time.sleep(60)", timeout=2)
        # ... taken on the nodes by each engine's faulthandler, signalled through Slurm
        where = cluster.where()
        assert where == {r: "in the cell (line 1)" for r in range(4)}, where
        assert "rank 3: still running, in the cell (line 1)" in str(err.value), str(err.value)
        # interrupt: SIGINT reaches the engines on the nodes through Slurm
        cluster.interrupt()
        cluster.px(ALL_REDUCE)

        before, old_job = [r.pid for r in cluster.ranks], cluster.launcher.jobs[-1]
        t0 = time.perf_counter()
        cluster.restart()
        restarted_in = time.perf_counter() - t0
        assert not alive(before), f"engines of the old job still run: {alive(before)}"
        assert old_job not in _queue(), f"job {old_job} still in squeue after restart()"
        assert [r.host for r in cluster.ranks] == ["node1", "node1", "node2", "node2"]
        cluster.px(ALL_REDUCE)
        engines, job = [r.pid for r in cluster.ranks], cluster.launcher.jobs[-1]
    finally:
        cluster.stop()
    assert job not in _queue(), f"job {job} still in squeue after stop(): {_queue()}"
    assert not _queue(), f"jobs left in squeue: {_queue()}"
    assert not alive(engines), f"engines left after stop(): {alive(engines)}"
    print(f"4 ranks on 2 Slurm nodes: start {started_in:.1f} s, restart {restarted_in:.1f} s")


def test_a_job_that_stays_pending_is_cancelled_with_squeues_reason(slurm_env):
    with pytest.raises(ClusterError, match=r"still pending after 2 s \(squeue's reason: "
                                           r"BeginTime\)\. It is cancelled"):
        start_cluster(n=2, nodes=2, launcher="slurm", activate=False, start_timeout=2,
                      sbatch=["--begin=now+3600"])
    assert not _queue(), f"jobs left in squeue: {_queue()}"


def test_a_refused_job_says_what_sbatch_said(slurm_env):
    with pytest.raises(ClusterError, match=r"sbatch refused.*Invalid partition"):
        start_cluster(n=2, nodes=2, launcher="slurm", activate=False,
                      sbatch="--partition=no-such-partition")


def test_a_killed_kernel_takes_its_slurm_job_with_it(slurm_env, tmp_path):
    """The guard cancels the job when the process that started the cluster dies by SIGKILL."""
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from helpers.cluster import start_cluster
        c = start_cluster(n=2, nodes=2, launcher="slurm", activate=False)
        print("JOB", c.launcher.jobs[-1], *[r.pid for r in c.ranks], flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "JOB", f"the cluster did not start: {line}"
        job, pids = line[1], [int(p) for p in line[2:]]
        assert job in _queue()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30
        while (job in _queue() or alive(pids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job not in _queue(), f"job {job} still queued 30 s after the kernel died"
        assert not alive(pids), f"engines {alive(pids)} alive 30 s after the kernel died"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _jobs_ever() -> dict[int, str]:
    """{job id: 'name nodes'} of every job slurmctld still remembers (ended ones for minutes)."""
    out = slurm.run(["squeue", "-h", "-t", "all", "-o", "%i|%j %N"])
    return {int(i): rest for i, _, rest in (line.partition("|") for line in out.splitlines())}


# (notebook 01 runs unchanged inside an allocation below, on the same two nodes)
@pytest.mark.parametrize("notebook, ranks", [
    # 2 ranks on 2 nodes: RPC's two workers (ranks 0 and 1) on different hosts, its rendezvous
    # in the shared folder, its listeners on the nodes' interface
    ("09_model_parallel", 2),
])
def test_a_lesson_notebook_runs_unchanged_across_two_nodes(slurm_env, notebook, ranks):
    before = max(_jobs_ever(), default=0)
    env = dict(slurm_env, COURSE_LAUNCHER="slurm", COURSE_NODES="2", COURSE_WORLD_SIZE=str(ranks))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
         "--nbval-current-env", "--nbval-cell-timeout=240", f"notebooks/{notebook}.ipynb"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert not _queue(), f"jobs left in squeue after the notebook: {_queue()}"
    ran = {i: what for i, what in _jobs_ever().items() if i > before}
    assert ran and all(what == "course-engines node[1-2]" for what in ran.values()), (
        f"the notebook's engines did not run as jobs on both nodes: {ran}")


def test_no_sbatch_is_a_clear_error(monkeypatch, tmp_path):
    """Runs everywhere: without Slurm's commands on PATH the error says what to do."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("COURSE_CONTROLLER_IP", "10.0.0.1")
    monkeypatch.delenv("COURSE_CONTROLLER_NETNS", raising=False)
    with pytest.raises(ClusterError, match=r"launcher 'slurm' needs sbatch, squeue, scancel, "
                                           r"srun on PATH"):
        start_cluster(n=2, launcher="slurm", activate=False)


# ---- inside an allocation: the kernel runs in a Slurm job (salloc, an HPC centre's Jupyter) --
def _inside(slurm_env: dict[str, str]) -> dict[str, str]:
    """The environment of a kernel started inside a job: Slurm's commands, nothing that picks
    a launcher or a number of nodes (the job's are the default)."""
    return {k: v for k, v in slurm_env.items() if k not in ("COURSE_LAUNCHER", "COURSE_NODES")}


def _steps(job: str) -> list[str]:
    """The names of the job's steps that run now."""
    return slurm.run(["squeue", "-h", "-s", "-j", job, "-o", "%j"]).split()


INSIDE = textwrap.dedent(f"""
    import os, subprocess, sys
    sys.path.insert(0, {str(ROOT)!r})
    from helpers.cluster import start_cluster
    c = start_cluster(activate=False, backend="gloo")
    print("REPR", repr(c))
    print("HOSTS", *[r.host for r in c.ranks])
    c.px({ALL_REDUCE!r})
    job = os.environ["SLURM_JOB_ID"]
    steps = lambda: subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%j"],
                                   capture_output=True, text=True).stdout.split()
    print("STEPS", *steps())
    c.restart()
    c.px({ALL_REDUCE!r})
    print("RESTARTED", *[r.host for r in c.ranks], "STEPS", *steps())
    c.stop()
    state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                           text=True).stdout.split()
    print("STOPPED", "STEPS", *steps(), "JOB", *state)
""")


def test_inside_an_allocation_the_ranks_are_a_step_of_that_job(slurm_env, tmp_path):
    """A kernel inside `salloc -N 2` starts its cluster with no launcher named: one srun step
    on the job's two nodes, said in its repr; restart and stop end that step, not the job."""
    script = tmp_path / "kernel.py"
    script.write_text(INSIDE)
    done = subprocess.run(["salloc", "-N", "2", "--ntasks=4", "--cpus-per-task=2",
                           sys.executable, str(script)], env=_inside(slurm_env),
                          capture_output=True, text=True, timeout=300)
    lines = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line}
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a step of Slurm job" in " ".join(lines["REPR"]), lines["REPR"]
    assert lines["HOSTS"] == ["node1", "node1", "node2", "node2"], lines["HOSTS"]
    assert lines["STEPS"] == ["course-engines"], f"the job's steps: {lines['STEPS']}"
    assert lines["RESTARTED"] == ["node1", "node1", "node2", "node2", "STEPS", "course-engines"]
    # after stop(): no step of the engines left, and the learner's job still running
    assert lines["STOPPED"] == ["STEPS", "JOB", "RUNNING"], lines["STOPPED"]
    assert not _queue(), f"jobs left in squeue: {_queue()}"


def test_a_killed_kernel_inside_an_allocation_ends_its_step_and_leaves_the_job(slurm_env,
                                                                            tmp_path):
    """As under an HPC centre's Jupyter: the job holds the allocation (salloc --no-shell), the
    kernel runs with its SLURM_ variables. Killed by SIGKILL, its guard ends the engines' step;
    the job, the learner's, goes on."""
    out = subprocess.run(["salloc", "-N", "2", "--no-shell"], env=_inside(slurm_env),
                         capture_output=True, text=True, timeout=60)
    job = out.stderr.split("Granted job allocation")[-1].split()[0]
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from helpers.cluster import start_cluster
        c = start_cluster(n=2, activate=False, backend="gloo")
        print("PIDS", *[r.pid for r in c.ranks], flush=True)
        time.sleep(600)
    """))
    env = dict(_inside(slurm_env), SLURM_JOB_ID=job, SLURM_JOB_NUM_NODES="2",
               SLURM_JOB_NODELIST="node[1-2]")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "PIDS", f"the cluster did not start: {line}"
        pids = [int(p) for p in line[1:]]
        assert _steps(job) == ["course-engines"], _steps(job)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30
        while (_steps(job) or alive(pids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _steps(job), "the engines' step still runs 30 s after the kernel died"
        assert not alive(pids), f"engines {alive(pids)} alive 30 s after the kernel died"
        assert slurm.job_state(job)[0] == "RUNNING", "the learner's job was ended too"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        slurm.cancel(job)


def test_a_lesson_notebook_runs_unchanged_inside_an_allocation(slurm_env):
    """Notebook 01 at 4 ranks, its kernel inside `salloc -N 2`: the setup cell's
    start_cluster() takes the job's two nodes with no launcher named."""
    env = dict(_inside(slurm_env), COURSE_WORLD_SIZE="4")
    done = subprocess.run(
        ["salloc", "-N", "2", "--ntasks=4", sys.executable, "-m", "pytest", "-q", "-p",
         "no:cacheprovider", "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=240",
         "notebooks/01_point_to_point.ipynb"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert not _queue(), f"jobs left in squeue after the notebook: {_queue()}"
