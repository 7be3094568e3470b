"""Engines as a Slurm job (``launcher="slurm"``, README "Run the course on a Slurm cluster"):
the launcher, and the job's commands: what it is doing, why it waits, cancelling it, and
signalling its ranks.

ipyparallel's Slurm launcher submits the job (``sbatch``) and cancels it (``scancel``), but
never asks what became of it. The course asks ``squeue``, so that a job that waits for nodes
or dies before its engines register gives an error that says why, and so that ``stop()``
returns only once the job has left the queue. Every command is bounded by a timeout.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import engine
from ..errors import START_ADVICE, ClusterError
from ..topology import (
    controller_address,
    gpus_per_node,
    sbatch_extra,
    sbatch_options,
    shared_folder,
    threads_per_rank,
)
from .base import Launcher, log_tail

if TYPE_CHECKING:
    from .base import RankInfo

COMMANDS = ("sbatch", "squeue", "scancel", "srun")
# states in which no process of the job runs any more (squeue keeps them a few minutes)
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
         "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}


class SlurmError(RuntimeError):
    """A Slurm command failed or a job did not do what was asked; the message says what to do."""


def missing_commands() -> list[str]:
    """The Slurm commands the launcher needs that are not on PATH."""
    return [cmd for cmd in COMMANDS if shutil.which(cmd) is None]


def run(args: list[str], timeout: float = 30.0) -> str:
    """A Slurm command's output; SlurmError with its message if it fails or takes too long."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(args)} did not answer within {timeout:g} s: is slurmctld "
                         "reachable from this machine? (try: sinfo)") from None
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} is not on PATH: run the notebook on a machine with "
                         "Slurm's commands (a login node), or use COURSE_LAUNCHER=local") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def job_state(job_id: str) -> tuple[str, str] | None:
    """(state, reason) of the job, as squeue says (e.g. ('PENDING', 'Resources')), or None once
    squeue no longer knows it."""
    try:
        out = run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"]).strip()
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return None
        raise
    if not out:
        return None
    state, _, reason = out.splitlines()[0].partition("|")
    return state, reason


def ended(state: tuple[str, str] | None) -> bool:
    """True if no process of a job in this state runs any more."""
    return state is None or state[0] in ENDED


def cancel(job_id: str, timeout: float = 30.0) -> None:
    """scancel the job, then wait (bounded) until none of its processes runs."""
    run(["scancel", job_id], timeout)
    wait_ended(job_id, timeout)


def wait_ended(job_id: str, timeout: float = 30.0) -> None:
    """Wait (bounded) until none of the job's processes runs."""
    deadline = time.monotonic() + timeout
    while not ended(job_state(job_id)):
        if time.monotonic() > deadline:
            raise SlurmError(f"job {job_id} was cancelled but still runs after {timeout:g} s "
                             f"(squeue -j {job_id}); its nodes may be unresponsive")
        time.sleep(0.2)


def signal_ranks(job_id: str, host: str, pids: list[int], number: int) -> None:
    """Send signal number to processes of the job on one of its nodes, through a job step
    that shares the job's resources (srun --overlap), since the kernel runs on another host."""
    run(["srun", f"--jobid={job_id}", "--overlap", f"--nodelist={host}", "--nodes=1",
         "--ntasks=1", "kill", f"-{number}", *map(str, pids)])


# the engines' Slurm job (ipyparallel's launcher fills in the braces); srun starts one engine per
# task, on the nodes and in the order Slurm gives
SLURM_TEMPLATE = """#!/bin/sh
#SBATCH --job-name=course-engines
#SBATCH --output={output_file}
{options}
srun {program_and_args}
"""


class SlurmLauncher(Launcher):
    """The engines as one Slurm job: sbatch, then srun starts one engine per task on the nodes.

    The controller stays on this machine and listens for engines on the address the nodes
    share ($COURSE_CONTROLLER_IP, else what this machine's name resolves to); the cluster's
    files go in a folder the nodes see too; the ranks meet through a TCP store on rank 0's node.
    """

    name = "slurm"
    spans_hosts = True
    shared_log = True

    @classmethod
    def gpus(cls, sbatch: list[str] | str | None, hosts: int) -> int:
        """GPUs the job asks for on each node, times the nodes (not this machine's)."""
        return gpus_per_node(sbatch_extra(sbatch)) * hosts

    @classmethod
    def job_options(cls, sbatch: list[str] | str | None, world_size: int, hosts: int) -> list[str]:
        return sbatch_options(world_size, hosts, sbatch_extra(sbatch))

    @classmethod
    def check_ready(cls) -> None:
        if missing := missing_commands():
            raise ClusterError(f"launcher 'slurm' needs {', '.join(missing)} on PATH: run the "
                               "notebook on a machine of the Slurm cluster (a login node), "
                               "source .cluster/env for make cluster-up's cluster, or use "
                               "COURSE_LAUNCHER=local")

    def __init__(self, cluster) -> None:
        super().__init__(cluster)
        # this machine's address on the nodes' network (a ClusterConfigError before anything
        # is made, if it has none)
        self.controller_ip = controller_address(os.environ, _resolved_hostname())
        self.jobs: list[str] = []  # the engines' job of each start
        self._ending: list[str] = []  # jobs cancelled, not yet gone from the queue
        self._polled = 0.0  # when squeue was last asked about the starting job

    @staticmethod
    def make_dir() -> tuple[Path, Path]:
        """A folder the nodes see too ($COURSE_SHARED_DIR, else the notebook's folder); the
        controller's sockets on this machine's own disk, under a short path (a socket's path
        holds at most 107 bytes)."""
        return (Path(tempfile.mkdtemp(prefix=".course-cluster-", dir=shared_folder())),
                Path(tempfile.mkdtemp(prefix="course-sockets-")))

    def engine_env(self) -> dict[str, str]:
        """None: the engines live on other hosts, where the guard cannot see them (it cancels
        their job instead)."""
        return {}

    def controller_launch(self) -> dict[str, Any]:
        """$COURSE_CONTROLLER_NETNS (make cluster-up's cluster) runs the controller in that
        network namespace, where the nodes' address is."""
        netns = os.environ.get("COURSE_CONTROLLER_NETNS", "").strip()
        if not netns:
            return {}
        nsenter = shutil.which("nsenter")
        if nsenter is None or not Path(netns).exists():
            raise ClusterError(f"COURSE_CONTROLLER_NETNS={netns}: needs nsenter and that "
                               "namespace (is make cluster-up's cluster up?)")
        return {"controller_cmd": [nsenter, f"--net={netns}", "--", sys.executable, "-m",
                                   "ipyparallel.controller"]}

    def engine_ip(self) -> str | None:
        return self.controller_ip

    def _batch_file(self) -> Path:
        return self.cluster.dir / f"engines-{self.cluster.starts}.sbatch"

    def start_engines(self, logs: list[Path]) -> list[int]:
        """Submit the engines' job; its id goes to self.jobs and to the guard. No local pids."""
        c = self.cluster
        ipp = c.controller.ipp
        ipp.engine_launcher_class = "slurm"
        lines = "\n".join(f"#SBATCH {option}" for option in c.sbatch)
        try:
            set_id = ipp.start_engines_sync(
                c.world_size, engine_args=c.engine_argv(), environment=c.engine_env(),
                output_file=str(logs[0]), batch_template=SLURM_TEMPLATE,
                namespace={"options": lines},
                batch_file_name=str(self._batch_file()))  # absolute: not in the notebook's folder
        except subprocess.CalledProcessError:
            raise ClusterError(f"sbatch refused the engines' job: {self._sbatch_says()}. "
                               f"Its options were {' '.join(c.sbatch)} (from n=, nodes=, "
                               "sbatch= and COURSE_SBATCH)") from None
        job = ipp.engines[set_id].job_id
        self.jobs.append(job)
        c.tell_guard(f"job {job}")
        return []

    def _sbatch_says(self) -> str:
        """What sbatch says of the engines' batch script (run again with --test-only)."""
        if not self._batch_file().exists():
            return "(no batch script was written)"
        done = subprocess.run(["sbatch", "--test-only", str(self._batch_file())],
                              capture_output=True, text=True, timeout=30)
        return " ".join((done.stderr or done.stdout).split()) or "(sbatch said nothing)"

    def watch_start(self, log: Path, registered: int, deadline: float) -> None:
        """A ClusterError (job cancelled) if the job has ended, or is still pending or its
        engines unregistered at the deadline; asks squeue at most once a second."""
        if time.monotonic() - self._polled < 1 and time.monotonic() < deadline:
            return
        self._polled = time.monotonic()
        c, job = self.cluster, self.jobs[-1]
        state = job_state(job)
        if not ended(state) and time.monotonic() < deadline:
            return
        if state is not None and state[0] == "PENDING":
            problem = (f"Slurm job {job} was still pending after {c.start_timeout:g} s "
                       f"(squeue's reason: {state[1]}). It is cancelled. Ask for fewer nodes "
                       "or ranks, another partition (COURSE_SBATCH=--partition=...), or a "
                       "larger start_timeout")
        elif ended(state):
            problem = (f"Slurm job {job} ended ({state[0] if state else 'gone from squeue'}) "
                       f"after {registered} of {c.world_size} engines registered; its "
                       f"output ({log}) ends:\n{log_tail(log)}")
        else:
            problem = (f"Slurm job {job} runs, but only {registered} of {c.world_size} "
                       f"engines reached the controller at {self.controller_ip} within "
                       f"{c.start_timeout:g} s. It is cancelled. Can the nodes reach this "
                       "address? Set COURSE_CONTROLLER_IP to this machine's address on their "
                       f"network. The job's output ends:\n{log_tail(log)}")
        self._cancel_jobs()
        raise ClusterError(f"{problem}\n{START_ADVICE}")

    def threads(self, ranks: list[RankInfo], infos: dict[int, dict]) -> dict[int, int]:
        """Each node's CPUs (as the engines there report them), shared by the ranks on it."""
        hosts = [r.host for r in ranks]
        return {r.rank: threads_per_rank(infos[r.engine_id]["cpus"], hosts.count(r.host))
                for r in ranks}

    def store(self) -> tuple[dict[str, Any], str | None]:
        """A TCP store on rank 0's host; each rank finds its own interface towards it."""
        c = self.cluster
        first = c.client[c.ranks[0].engine_id]
        store = c.gather({0: first.apply_async(engine.open_store, self.controller_ip)},
                         "open the rendezvous store")[0]
        return store, None

    def end_engines(self, grace: float, wait: bool) -> None:
        super().end_engines(grace, wait)
        self._cancel_jobs(wait)

    def _cancel_jobs(self, wait: bool = True) -> None:
        """scancel every job of this cluster; with wait, also wait until none of their engines
        runs (restart() waits later, while the new job starts)."""
        while self.jobs:
            job = self.jobs.pop()
            run(["scancel", job])
            self._ending.append(job)
        if wait:
            self.after_restart()

    def after_restart(self) -> None:
        """Wait until the cancelled jobs have left the queue; then the guard may forget them."""
        while self._ending:
            wait_ended(self._ending[0])
            self.cluster.tell_guard(f"done {self._ending.pop(0)}")

    def signal(self, ranks: list[RankInfo], number: int) -> None:
        """Ranks on the job's nodes through a job step there; any on this machine directly."""
        remote: dict[str, list[int]] = {}
        for r in ranks:
            if r.remote:
                remote.setdefault(r.host, []).append(r.pid)
        super().signal([r for r in ranks if not r.remote], number)
        for host, pids in remote.items():
            try:
                signal_ranks(self.jobs[-1], host, pids, number)
            except SlurmError as e:
                raise ClusterError(f"could not signal the ranks on {host}: {e}") from None

    def stack_sender(self, rank: RankInfo) -> Callable[[int, int], None] | None:
        if not (rank.remote and self.jobs):
            return None
        return lambda pid, number: signal_ranks(self.jobs[-1], rank.host, [pid], number)


def _resolved_hostname() -> str | None:
    """The address this machine's name resolves to, or None."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
