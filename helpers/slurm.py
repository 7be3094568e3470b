"""The Slurm job that holds a cluster's engines (``launcher="slurm"``, README "Run the course on a
Slurm cluster"): what it is doing, why it waits, cancelling it, and signalling its ranks.

ipyparallel's Slurm launcher submits the job (``sbatch``) and cancels it (``scancel``), but
never asks what became of it. The course asks ``squeue``, so that a job that waits for nodes
or dies before its engines register gives an error that says why, and so that ``stop()``
returns only once the job has left the queue. Every command is bounded by a timeout.
"""

from __future__ import annotations

import shutil
import subprocess
import time

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
