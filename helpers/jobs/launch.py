"""Run a launcher such as torchrun from a notebook cell: bounded, and watched for open ports.

Introduced in notebook 07 (launching jobs), which uses it throughout. A run that outlives
its timeout is ended as a whole: the launcher and every process it started (torchrun starts
each worker in a session of its own, so they are found as its descendants, not by process
group).
While it runs, every address on which one of its processes listens is recorded, so the
notebook can check that nothing was reachable from outside the machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import psutil

from ..cluster.topology import loopback_interface
from ..cluster.watchdog import wait_ended
from ..text import live


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
    """IP addresses on which the process pid or any of its descendants listens (TCP).

    run_many asks this every 50 ms while a job runs. On Linux it reads each network
    namespace's TCP tables once per call (_listening_linux), where psutil reads them again
    for every process: about 7 times less CPU for a torchrun of four workers, CPU that the
    job's own processes need on a small machine. Elsewhere, psutil.
    """
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    if os.path.isdir("/proc/self/net"):
        return _listening_linux([p.pid for p in procs])
    found = set()
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        found |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    return found


def _listening_linux(pids: Sequence[int]) -> set[str]:
    """The addresses of the TCP sockets in LISTEN state that these processes hold: their
    sockets' inodes from /proc/PID/fd, looked up in /proc/PID/net/tcp and tcp6, read once per
    network namespace. A process that ends meanwhile is skipped."""
    sockets: dict[str, set[int]] = {}  # network namespace -> socket inodes held there
    reader: dict[str, int] = {}  # network namespace -> a pid to read its tables through
    for pid in pids:
        try:
            namespace = os.readlink(f"/proc/{pid}/ns/net")
            held = sockets.setdefault(namespace, set())
            reader.setdefault(namespace, pid)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    held.add(int(link[8:-1]))
        except OSError:
            continue
    found = set()
    for namespace, held in sockets.items():
        for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
            try:
                with open(f"/proc/{reader[namespace]}/net/{table}") as f:
                    rows = f.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()
                if fields[3] == "0A" and int(fields[9]) in held:  # 0A: TCP_LISTEN
                    found.add(_proc_address(fields[1].split(":")[0], family))
    return found


def _proc_address(hex_ip: str, family: int) -> str:
    """An address as /proc/net/tcp[6] writes it (32-bit words in host byte order), as text."""
    words = bytes.fromhex(hex_ip)
    raw = b"".join(words[i:i + 4][::-1] if sys.byteorder == "little" else words[i:i + 4]
                   for i in range(0, len(words), 4))
    return socket.inet_ntop(family, raw)


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
    wait_ended(procs, timeout=5)


def run_many(
    cmds: Sequence[Sequence[str]],
    env: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
    timeout: float = 60.0,
    cwd: str | None = None,
    poll_s: float = 0.05,
) -> list[LaunchResult]:
    """Run several commands side by side (the ranks, or the nodes, of one job) to the end.

    env is one environment for all, or one per command (default: this process's). All of
    them are ended, with their children, once timeout s have passed. Their temporary files
    (TMPDIR) go to a folder of the run's own, removed at the end: torchrun
    leaves a log folder (/tmp/torchelastic_*) behind each run otherwise.
    """
    envs = [env] * len(cmds) if env is None or isinstance(env, Mapping) else list(env)
    if len(envs) != len(cmds):
        raise ValueError(f"{len(cmds)} commands but {len(envs)} environments")
    with ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="course-run-",
                                                                  ignore_cleanup_errors=True))
        envs = [{**(os.environ if e is None else e), "TMPDIR": scratch} for e in envs]
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in cmds]
        procs = [subprocess.Popen(list(cmd), env=e, cwd=cwd, stdout=log,
                                  stderr=subprocess.STDOUT)
                 for cmd, e, log in zip(cmds, envs, logs)]
        listening: list[set[str]] = [set() for _ in procs]
        start = shown = time.monotonic()
        deadline = start + timeout
        while (running := sum(p.poll() is None for p in procs)) and time.monotonic() < deadline:
            for seen, proc in zip(listening, procs):
                seen |= listening_addresses(proc.pid)
            if live() and time.monotonic() - shown >= 0.5:  # a learner sees the job run;
                shown = time.monotonic()                     # stored outputs stay the same
                print(f"\r{running} of {len(procs)} command(s) running, {shown - start:4.0f} s",
                      end="", flush=True)
            time.sleep(poll_s)
        if live():
            print("\r" + " " * 40 + "\r", end="", flush=True)
        results = []
        for proc, log, seen in zip(procs, logs, listening):
            timed_out = proc.poll() is None
            if timed_out:
                end_tree(proc.pid)
                proc.wait()
            log.seek(0)
            results.append(LaunchResult(None if timed_out else proc.returncode, log.read(),
                                        timed_out, seen))
        return results


def run_watched(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    cwd: str | None = None,
    poll_s: float = 0.05,
) -> LaunchResult:
    """Run cmd to the end (ended after timeout s), noting every address its processes listen on."""
    return run_many([cmd], env, timeout, cwd, poll_s)[0]


def pinned(cmd: Sequence[str]) -> list[str]:
    """cmd (a script, `-m MODULE` or `torchrun` and its arguments) with its TCP stores pinned
    to the address they are given (helpers.jobs.pinstore; notebook 07)."""
    return [sys.executable, "-m", "helpers.jobs.pinstore", *cmd]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on host right now (for a rendezvous: the launcher binds it moments later)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """count different TCP ports free on host right now (all held at once while they are drawn)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def loopback_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a job on this machine alone: gloo and NCCL on the loopback
    interface, one thread per process (the ranks share the machine's cores)."""
    lo = loopback_interface([name for _, name in socket.if_nameindex()])
    return dict(os.environ if base is None else base, GLOO_SOCKET_IFNAME=lo,
                NCCL_SOCKET_IFNAME=lo, OMP_NUM_THREADS="1")


def reports(output: str, tag: str = "REPORT") -> list[dict[str, Any]]:
    """The JSON objects a job printed after tag (one per worker, say).

    Found anywhere in the output: launchers may put a prefix such as [rank0]: before a line,
    and the lines of processes that share one output can run into each other.
    """
    decoder, found, marker = json.JSONDecoder(), [], f"{tag} {{"
    at = output.find(marker)
    while at >= 0:
        obj, end = decoder.raw_decode(output, at + len(marker) - 1)
        found.append(obj)
        at = output.find(marker, end)
    return found
