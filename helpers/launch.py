"""Run a launcher such as torchrun from a notebook cell: bounded, and watched for open ports.

Introduced in notebook 04 (from notebook to script). A run that outlives its timeout is
ended as a whole: the launcher and every process it started (torchrun starts each worker
in a session of its own, so they are found as its descendants, not by process group).
While it runs, every address on which one of its processes listens is recorded, so the
notebook can check that nothing was reachable from outside the machine.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil


@dataclass
class LaunchResult:
    """How a watched run ended, what it printed, and where its processes listened."""

    returncode: int | None
    output: str
    timed_out: bool
    listening: set[str] = field(default_factory=set)


def torchrun_command() -> list[str]:
    """This environment's torchrun (`torchrun` is `python -m torch.distributed.run`)."""
    return [sys.executable, "-m", "torch.distributed.run"]


def listening_addresses(pid: int) -> set[str]:
    """IP addresses on which the process pid or any of its descendants listens (TCP)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    found = set()
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        found |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    return found


def end_tree(pid: int) -> None:
    """Kill the process pid and all its descendants (the launcher of a run and its workers)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def run_watched(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    cwd: str | None = None,
    poll_s: float = 0.05,
) -> LaunchResult:
    """Run cmd to the end (ended after timeout s), noting every address its processes listen on."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT)
        listening: set[str] = set()
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            listening |= listening_addresses(proc.pid)
            time.sleep(poll_s)
        timed_out = proc.poll() is None
        if timed_out:
            end_tree(proc.pid)
            proc.wait()
        log.seek(0)
        return LaunchResult(None if timed_out else proc.returncode, log.read(), timed_out,
                            listening)
