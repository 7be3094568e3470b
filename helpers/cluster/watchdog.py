"""A small guard process that ends a cluster whose notebook kernel has gone away.

Introduced in notebook 00 (teardown) and exercised in notebook 06. Every process a
cluster starts carries ``COURSE_CLUSTER_DIR=<its private directory>`` in its environment.
The kernel starts this guard with a pipe on its stdin. When the kernel stops the cluster
itself it writes ``release`` and the guard exits quietly. If the kernel dies instead, even
by SIGKILL, the pipe closes: the guard then ends exactly the processes that carry this
cluster's directory (controller, its schedulers, engines, nannies) and removes the directory.
Engines that run as a Slurm job live on other hosts: the kernel writes ``job ID`` when it
submits one and ``done ID`` once it has cancelled it; the guard cancels those still open.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil

MARKER = "COURSE_CLUSTER_DIR"


def course_processes(cluster_dir: str | None = None) -> list[psutil.Process]:
    """Live processes started by course clusters: all of them, or those of one cluster_dir."""
    found = []
    for proc in psutil.process_iter():
        try:
            tag = proc.environ().get(MARKER)
        except psutil.Error:
            continue
        if tag is not None and (cluster_dir is None or tag == cluster_dir):
            found.append(proc)
    return found


def _ended(proc: psutil.Process) -> bool:
    """Whether proc has exited: it is gone, or a zombie (collected here if it is a child of
    this process). A zombie has exited and holds nothing (memory, files, ports): it only waits
    for its parent to collect its exit status, and the new parent of an orphan (init, or a
    container's first process) may take seconds to do that (about 2 s in some containers)."""
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
        proc.wait(0)  # collects a child of this process; another's raises TimeoutExpired
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        pass
    return True


def wait_ended(procs: Sequence[psutil.Process], timeout: float,
               poll_s: float = 0.01) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(ended, alive): psutil.wait_procs, except that a zombie counts as ended (_ended)."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while True:
        alive = [p for p in alive if not _ended(p)]
        if not alive or time.monotonic() >= deadline:
            return [p for p in procs if p not in alive], alive
        time.sleep(poll_s)


def end_processes(procs: list[psutil.Process], grace_s: float = 3.0) -> list[int]:
    """SIGTERM the processes, SIGKILL those still alive after grace_s; return their pids."""
    procs = [p for p in procs if p.pid != os.getpid()]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = wait_ended(procs, timeout=grace_s)  # a zombie has ended: not killed, not
    for proc in alive:                             # waited for until init collects it
        try:
            proc.kill()
        except psutil.Error:
            pass
    wait_ended(alive, timeout=grace_s)
    return sorted(p.pid for p in procs)


def main(argv: list[str]) -> int:
    """Wait for 'release' or for stdin to close; on close, end the cluster of argv[1] and
    remove its folders (argv[1], and its socket folder argv[2] if it has one of its own)."""
    cluster_dir = argv[1]
    jobs: list[str] = []
    for line in sys.stdin:
        word, _, job = line.strip().partition(" ")
        if word == "release":
            return 0
        if word == "job":
            jobs.append(job)
        elif word == "done" and job in jobs:
            jobs.remove(job)
    for job in jobs:
        try:
            subprocess.run(["scancel", job], timeout=30, capture_output=True)
            print(f"course watchdog: kernel gone, cancelled Slurm job {job}", file=sys.stderr)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"course watchdog: could not cancel Slurm job {job}: {e}", file=sys.stderr)
    ended = end_processes(course_processes(cluster_dir))
    for folder in argv[1:]:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"course watchdog: kernel gone, ended pids {ended}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
