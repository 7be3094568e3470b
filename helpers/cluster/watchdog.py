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


def end_processes(procs: list[psutil.Process], grace_s: float = 3.0) -> list[int]:
    """SIGTERM the processes, SIGKILL those still alive after grace_s; return their pids."""
    procs = [p for p in procs if p.pid != os.getpid()]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
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
