"""Engines as one job step of the Slurm job the notebook itself runs in
(``launcher="allocation"``, chosen by default where $SLURM_JOB_ID is set; README "Run the
course on a Slurm cluster"): an HPC centre's Jupyter that runs inside an allocation, or
``salloc`` then ``jupyter lab``. Everything but the start and the end is the Slurm launcher's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ..errors import START_ADVICE, ClusterError
from ..topology import allocation, sbatch_extra, step_options
from ..watchdog import MARKER, end_processes
from .base import log_tail
from .slurm import SlurmError, SlurmLauncher, run

STEP_NAME = "course-engines"  # the engines' job step, inside the job the kernel runs in


class AllocationLauncher(SlurmLauncher):
    """The engines as one job step (``srun``) of the Slurm job this kernel runs inside
    ($SLURM_JOB_ID): an HPC centre's Jupyter that runs in an allocation (Open OnDemand,
    batchspawner), or ``salloc`` then ``jupyter lab``. Nothing is submitted: the job is the
    learner's, its nodes and GPUs already theirs. Ending the cluster ends the step (scancel
    JOB.STEP, and the local srun), never the job.

    The step shares the job's resources with any step already running (``--overlap``): a
    Jupyter server started by ``srun`` in the job's batch script holds them otherwise, and the
    engines' step would wait for them forever."""

    name = "allocation"

    @classmethod
    def default_nodes(cls) -> int | None:
        return _job()["nodes"]

    @classmethod
    def gpus(cls, sbatch: list[str] | str | None, hosts: int) -> int:
        """GPUs the job has on each node, times the nodes the ranks use."""
        job = allocation()
        return int(job["gpus_per_node"]) * hosts if job else 0

    @classmethod
    def job_options(cls, sbatch: list[str] | str | None, world_size: int, hosts: int) -> list[str]:
        return step_options(world_size, hosts, int(_job()["nodes"]), sbatch_extra(sbatch, {}))

    @classmethod
    def check_ready(cls) -> None:
        if allocation() is None:
            raise ClusterError("launcher 'allocation' starts the engines inside the Slurm job "
                               "this notebook runs in, and SLURM_JOB_ID is not set: start "
                               "JupyterLab inside a job (salloc, then jupyter lab), or use "
                               "COURSE_LAUNCHER=slurm to submit one, or COURSE_LAUNCHER=local")
        if missing := [cmd for cmd in ("srun", "squeue", "scancel") if shutil.which(cmd) is None]:
            raise ClusterError(f"launcher 'allocation' needs {', '.join(missing)} on PATH "
                               "(the Slurm job's machine should have them: load the site's "
                               "Slurm module), or use COURSE_LAUNCHER=local")

    def __init__(self, cluster) -> None:
        super().__init__(cluster)
        self.job = str(_job()["job"])
        self.jobs = [self.job]  # for signal_ranks: job steps that share the job's resources
        self.srun: list[psutil.Process] = []  # the local srun of each start
        self._popen: list[subprocess.Popen] = []

    def engine_env(self) -> dict[str, str]:
        """The cluster's tag: the guard ends the local srun (and with it the step) should the
        kernel die."""
        return {MARKER: str(self.cluster.dir)}

    def start_engines(self, logs: list[Path]) -> list[int]:
        """One srun inside the job starts every engine; its pid (in a list). Started here,
        not through ipyparallel's MPI launcher, whose engines would call MPI_Init."""
        c = self.cluster
        srun = [shutil.which("srun") or "srun", f"--jobid={self.job}", f"--job-name={STEP_NAME}",
                "--overlap", "--kill-on-bad-exit=1", *c.sbatch,
                sys.executable, "-m", "ipyparallel.engine", *c.engine_argv()]
        with open(logs[0], "ab") as log:
            proc = subprocess.Popen(srun, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env={**os.environ, **c.engine_env()},
                                    start_new_session=True)  # the kernel's interrupts stay here
        self.srun.append(psutil.Process(proc.pid))
        self._popen.append(proc)  # (waited for when it ends: no zombie left)
        return [proc.pid]

    def watch_start(self, log: Path, registered: int, deadline: float) -> None:
        """A ClusterError (the step ended) if the engines have not all registered by the
        deadline; a step that cannot start says why in srun's output."""
        if time.monotonic() < deadline:
            return
        c = self.cluster
        self._cancel_jobs()
        raise ClusterError(
            f"the engines' step in Slurm job {self.job} did not bring {c.world_size} engines "
            f"to the controller at {self.controller_ip} within {c.start_timeout:g} s "
            f"({registered} came). The step is ended; the job goes on. If srun waited for "
            "resources, ask for fewer ranks or nodes; if the engines ran, can the job's nodes "
            "reach this address? (set COURSE_CONTROLLER_IP to this machine's address on their "
            f"network). srun's output ends:\n{log_tail(log)}\n{START_ADVICE}")

    def _cancel_jobs(self, wait: bool = True) -> None:
        """End the engines' steps (scancel JOB.STEP), then the local srun: never the job."""
        for step in self._steps():
            try:
                run(["scancel", step])
            except SlurmError:  # ended meanwhile
                pass
        end_processes(self.srun, grace_s=10.0)  # srun returns once its step has ended
        for proc in self._popen:
            proc.wait(timeout=10)
        self.srun, self._popen = [], []

    def _steps(self) -> list[str]:
        """The ids (JOB.STEP) of the engines' steps that squeue lists in the job."""
        try:
            out = run(["squeue", "-h", "-s", "-j", self.job, "-o", "%i %j"])
        except SlurmError:
            return []
        return [step for step, _, name in (line.partition(" ") for line in out.splitlines())
                if name.strip() == STEP_NAME]

    def after_restart(self) -> None:
        """Nothing to wait for: _cancel_jobs waited for the step's srun to end."""

    def describe(self) -> str:
        hosts = sorted({r.host for r in self.cluster.ranks})
        return f", a step of Slurm job {self.job} on {', '.join(hosts)}"


def _job() -> dict[str, object]:
    """The Slurm job this process runs in (a ClusterError outside one)."""
    job = allocation()
    if job is None:
        raise ClusterError("launcher 'allocation' needs a Slurm job around this notebook "
                           "(SLURM_JOB_ID is not set): start JupyterLab inside one (salloc, "
                           "then jupyter lab), or use COURSE_LAUNCHER=slurm or local")
    return job
