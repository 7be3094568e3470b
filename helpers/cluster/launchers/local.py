"""The default launcher: engines forked on this machine from a warm process (notebook 00)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import START_ADVICE, ClusterError
from ..forkserver import ForkServer, ForkServerError
from ..topology import isolation
from .base import ClusterView, Launcher


class LocalLauncher(Launcher):
    """Engines forked on this machine from a warm process that has already imported torch."""

    name = "local"

    def __init__(self, cluster: ClusterView) -> None:
        super().__init__(cluster)
        self.forkserver: ForkServer | None = None
        self.prefix, self.isolated = _isolation()

    def _new_forkserver(self) -> ForkServer:
        return ForkServer(dict(os.environ, **self.cluster.engine_env()),
                          self.cluster.dir / "forkserver.log", self.prefix)

    def prepare(self) -> None:
        self.forkserver = self._new_forkserver()  # its imports overlap the controller's

    def start_engines(self, logs: list[Path]) -> list[int]:
        if not self.forkserver.alive():
            self.forkserver = self._new_forkserver()
        c = self.cluster
        try:
            return self.forkserver.fork(
                [{"argv": c.engine_argv(), "log": str(log)} for log in logs], c.start_timeout)
        except ForkServerError as e:
            raise ClusterError(
                f"only 0 of {c.world_size} engines registered within "
                f"{c.start_timeout:g} s: {e}.\n{START_ADVICE}") from e

    def stop(self) -> None:
        if self.forkserver is not None:
            self.forkserver.stop()
            self.forkserver = None

    def describe(self) -> str:
        return f", {self.isolated}"


_usable: list[bool] = []  # whether this machine lets this user unshare a network (asked once)


def _isolation() -> tuple[list[str] | None, str]:
    """The fork server's prefix (topology.isolation), if unshare works here: user namespaces
    may be turned off (sysctl, AppArmor), in which case the ranks share this machine's
    network as they did before, and make check and the repr say so."""
    prefix, said = isolation(os.environ, sys.platform, os.geteuid(), shutil.which("unshare"),
                             shutil.which("ip"))
    if prefix is None:
        return None, said
    if not _usable:
        try:
            _usable.append(subprocess.run([*prefix, "true"], capture_output=True,
                                          timeout=10).returncode == 0)
        except (OSError, subprocess.TimeoutExpired):
            _usable.append(False)
    if not _usable[0]:
        return None, "not isolated (this machine does not let this user unshare a network)"
    return prefix, said
