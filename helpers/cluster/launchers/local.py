"""The default launcher: engines forked on this machine from a warm process (notebook 00)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import START_ADVICE, ClusterError
from ..forkserver import ForkServer, ForkServerError
from .base import ClusterView, Launcher


class LocalLauncher(Launcher):
    """Engines forked on this machine from a warm process that has already imported torch."""

    name = "local"

    def __init__(self, cluster: ClusterView) -> None:
        super().__init__(cluster)
        self.forkserver: ForkServer | None = None

    def _new_forkserver(self) -> ForkServer:
        return ForkServer(dict(os.environ, **self.cluster.engine_env()),
                          self.cluster.dir / "forkserver.log")

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
        return ""
