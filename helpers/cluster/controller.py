"""The ipyparallel controller of one cluster, and this kernel's client of it.

Introduced in notebook 00 (``start_cluster()`` starts it first). The kernel's client, the
hub's monitor and (unless the launcher says otherwise) the engines reach the controller
through Unix sockets in a private folder of this machine: only this user can open them, and
the controller takes no TCP port. Not ports, because ipyparallel picks each port by binding
port 0 and letting it go, and a child of the controller binds it moments later, by when
another process may have taken it (two kernels starting clusters at once, or any outgoing
connection); the child then exits and the cluster is broken from its first cell.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil

from . import replies
from .errors import START_ADVICE, ClusterError
from .watchdog import MARKER, end_processes

# the controller writes its connection files and binds its sockets within a second or two on
# an idle machine; this bounds one that never does (start_timeout is the engines')
CONTROLLER_WAIT = 60.0
SOCKET_PATH_MAX = 107  # bytes in a Unix socket's path (sun_path holds 108, with its NUL)


class Controller:
    """Start (and after a crash, replace) one cluster's controller and connect a client."""

    def __init__(self, cluster_dir: Path, socket_dir: Path, world_size: int,
                 start_timeout: float) -> None:
        self.dir, self.socket_dir = cluster_dir, socket_dir
        self.world_size, self.start_timeout = world_size, start_timeout
        self.ipp: ipp.Cluster | None = None
        self.client: ipp.Client | None = None
        self.pids: list[int] = []  # the hub and its schedulers
        self._started = 0  # controllers started so far (each gets its own sockets)

    @property
    def sockets(self) -> Path:
        """The folder of the current controller's Unix sockets."""
        return self.socket_dir / f"sockets-{self._started}"

    def start(self, engine_ip: str | None, launch: dict[str, Any]) -> ipp.Client:
        """Start a controller and return this kernel's client of it.

        engine_ip: the address engines connect to over TCP (engines on other hosts), or None
        for Unix sockets here; launch: how to run it (ipyparallel's controller_cmd, e.g. in
        another network namespace)."""
        self._started += 1  # each controller its own sockets (a dead one leaves its files)
        longest = self.sockets / "client:65535"
        if len(bytes(longest)) > SOCKET_PATH_MAX:
            raise ClusterError(f"the controller's sockets would be at {longest}, longer than "
                               f"the {SOCKET_PATH_MAX} bytes a Unix socket's path may have: "
                               "set TMPDIR to a short folder (e.g. /tmp) and start again.")
        self.sockets.mkdir()
        for old in (self.dir / "profile" / "security").glob("ipcontroller-*.json"):
            old.unlink()  # a dead controller's: the new one's are awaited below
        engines = [f"--IPController.engine_ip={engine_ip}"] if engine_ip else \
            ["--IPController.engine_transport=ipc",
             f"--IPController.engine_ip={self.sockets / 'engine'}"]
        self.ipp = ipp.Cluster(
            n=self.world_size, profile_dir=str(self.dir / "profile"), controller_ip="127.0.0.1",
            log_level=logging.ERROR, shutdown_atexit=False,
            # the hub accepts an engine at its first heartbeat, so beat often (every 0.1 s);
            # an engine is declared dead after 100 missed beats (10 s), as with the defaults
            controller_args=["--HeartMonitor.period=100", "--log-level=WARN",
                             "--HeartMonitor.max_heartmonitor_misses=100", *engines,
                             *self._client_transport()],
        )
        self.ipp.start_controller_sync(environment={MARKER: str(self.dir)}, **launch)
        self._link_sockets("client")
        if not engine_ip:
            self._link_sockets("engine")
        self.client = self.ipp.connect_client_sync()
        hub = psutil.Process(self.ipp.controller.pid)  # the hub, and its schedulers (children)
        self.pids = [hub.pid] + [p.pid for p in hub.children(recursive=True)]
        return self.client

    def _client_transport(self) -> list[str]:
        """Where this kernel's client and the hub's own monitor connect: Unix sockets."""
        return ["--IPController.client_transport=ipc",
                f"--IPController.client_ip={self.sockets / 'client'}",
                "--IPController.monitor_transport=ipc",
                f"--IPController.monitor_ip={self.sockets / 'monitor'}"]

    def _link_sockets(self, side: str) -> None:
        """ipyparallel's controller binds its Unix sockets as engine-PORT (client-PORT), and
        its engines (clients) connect to engine:PORT; a link under the second name for each
        makes them meet."""
        limit = max(self.start_timeout, CONTROLLER_WAIT)
        deadline = time.monotonic() + limit
        pattern = f"ipcontroller-*-{side}.json"

        def wait_a_moment(what: str) -> None:  # what the controller has not done yet
            if replies.is_dead(self.ipp.controller.pid):
                raise ClusterError(f"the controller exited before it had {what}.\n{START_ADVICE}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the controller had not {what} after {limit:g} s."
                                   f"\n{START_ADVICE}")
            time.sleep(0.01)

        while True:  # the controller writes the file in place: wait until it is whole
            try:
                files = list((self.dir / "profile" / "security").glob(pattern))
                info = json.loads(files[0].read_text())
                break
            except (IndexError, ValueError):
                wait_a_moment(f"written a whole {pattern}")
        ports = [v for v in info.values() if isinstance(v, int)]
        ports += [p for v in info.values() if isinstance(v, list) for p in v]
        for port in ports:
            bound, link = self.sockets / f"{side}-{port}", self.sockets / f"{side}:{port}"
            while not bound.exists():
                wait_a_moment(f"opened {bound.name}")
            if not link.is_symlink():
                link.symlink_to(bound.name)

    def gone(self) -> bool:
        """True if a process of the controller (the hub or a scheduler) has exited: then no
        message reaches the ranks any more."""
        return any(replies.is_dead(pid) for pid in self.pids)

    def end_remains(self) -> None:
        """End what is left of a dead controller and close the client (before a new start)."""
        end_processes([p for p in map(_process, self.pids) if p is not None])
        if self.client is not None:
            self.client.close()

    def stop(self) -> None:
        """Stop the controller and close the client; safe to call more than once."""
        if self.ipp is not None:
            try:
                self.ipp.stop_controller_sync()
            except Exception:  # noqa: BLE001 - whatever still runs is ended by pid afterwards
                pass
        if self.client is not None:
            self.client.close()
        self.ipp = self.client = None


def _process(pid: int) -> psutil.Process | None:
    """The process pid, or None if it has exited."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None
