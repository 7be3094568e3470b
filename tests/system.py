"""Tests that need a part of the system a learner's laptop may lack (root, Chromium, Slurm, MPI).

On a learner's machine such a test skips with a one-line reason. In CI, `.ci/run` installs
those parts and sets COURSE_REQUIRE_SYSTEM=1: a test that would skip fails instead, so that
CI always runs them.
"""

from __future__ import annotations

import os

import psutil
import pytest

from helpers.cluster.replies import is_dead

REQUIRE = "COURSE_REQUIRE_SYSTEM"


def need(available: object, reason: str) -> None:
    """Skip with reason when not available, or fail under COURSE_REQUIRE_SYSTEM=1."""
    if available:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: CI must run this test)")
    pytest.skip(reason)


def net_namespace(pid: int) -> str:
    """The network namespace of a process (as its /proc link names it)."""
    return os.readlink(f"/proc/{pid}/ns/net")


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (a zombie does not count: it has exited, and only waits for its
    parent, init for an orphan, to collect its status, which some containers' init does
    seconds late)."""
    return [p for p in pids if not is_dead(p)]


def listening_outside_loopback(pids: list[int]) -> list[tuple[int, str]]:
    """(pid, address) of the listening sockets these processes hold outside loopback, in this
    process's network namespace."""
    return [(c.pid, c.laddr.ip) for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids
            and c.laddr.ip not in ("127.0.0.1", "::1")]


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets a process holds (as /proc/PID/net/* name them); none where it
    has ended."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:  # ended meanwhile
        return set()
    return {link[8:-1] for link in links if link.startswith("socket:[")}


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket these processes listen on, each read in the
    process's own network namespace (/proc/PID/net/tcp and tcp6: a local cluster's ranks have
    a namespace of their own, which psutil, reading the caller's, does not see)."""
    import ipaddress
    import struct

    found = []
    for pid in pids:
        if not (held := socket_inodes(pid)):
            continue
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] != "0A" or fields[9] not in held:  # 0A: LISTEN
                        continue
                    address, port = fields[1].rsplit(":", 1)
                    words = struct.unpack("<" + "I" * (len(address) // 8),
                                          bytes.fromhex(address))  # each word little-endian
                    packed = b"".join(struct.pack(">I", w) for w in words)
                    found.append((pid, str(ipaddress.ip_address(packed)), int(port, 16)))
    return found
