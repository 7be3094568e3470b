"""Engines started by one ``mpiexec`` on this machine (``launcher="mpi"``, README "Engines
started by mpiexec").

Open MPI's mpiexec listens on every interface it can see and has no switch to bind to one
address. So it runs in a network namespace of its own (``unshare``: root, or a user namespace
elsewhere), whose only interface is that namespace's loopback; its engines reach the
controller through Unix sockets in the cluster's private folder, which the namespace shares.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import psutil

from ..errors import ClusterError
from ..topology import mpi_arguments, own_network
from ..watchdog import end_processes
from .base import Launcher


class MpiLauncher(Launcher):
    """One mpiexec, in a network namespace of its own, starts every engine."""

    name = "mpi"
    shared_log = True

    @classmethod
    def check_ready(cls) -> None:
        if shutil.which("mpiexec") is None:
            raise ClusterError("launcher 'mpi' needs mpiexec on PATH (Debian: apt-get install "
                               "openmpi-bin; on a cluster, load the site's MPI module), or use "
                               "COURSE_LAUNCHER=local")
        if importlib.util.find_spec("mpi4py") is None:
            raise ClusterError("launcher 'mpi' needs mpi4py in the engines' Python (pip install "
                               "-e '.[mpi]', or make install); or use COURSE_LAUNCHER=local")
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            raise ClusterError("launcher 'mpi' runs mpiexec in a network namespace of its own "
                               "and needs unshare and ip (Debian: util-linux and iproute2); "
                               "or use COURSE_LAUNCHER=local")

    def __init__(self, cluster) -> None:
        super().__init__(cluster)
        self.mpiexec: list[psutil.Process] = []  # the mpiexec of each start

    def start_engines(self, logs: list[Path]) -> list[int]:
        """Start the engines with one mpiexec; its pid (in a list)."""
        self.check_ready()
        mpiexec, unshare, ip = (shutil.which(cmd) for cmd in ("mpiexec", "unshare", "ip"))
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        c = self.cluster
        # Open MPI's session folder inside the cluster's own, removed at stop: its default,
        # /tmp/ompi.<host>.<uid>, is /tmp/ompi.<host>.0 for everyone inside the namespace,
        # and one left by a killed mpiexec of root's would stop every other user's
        session = c.dir / "mpi"
        session.mkdir(exist_ok=True)
        env = dict(c.engine_env(), OMPI_MCA_btl="self,vader",  # MPI: shared memory
                   # inside the namespace everyone is root: Open MPI must be told it may run
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_orte_tmpdir_base=str(session),  # Open MPI 4
                   PRTE_MCA_prte_tmpdir_base=str(session))  # Open MPI 5
        namespace = [unshare, *own_network(os.geteuid()), "--kill-child", "sh", "-c",
                     f'{ip} link set lo up && exec "$0" "$@"', mpiexec]
        ipp = c.controller.ipp
        ipp.engine_launcher_class = "mpi"
        set_id = ipp.start_engines_sync(
            c.world_size, engine_args=c.engine_argv(), environment=env,
            mpi_cmd=namespace, mpi_args=mpi_arguments(version, as_root=True),
            output_file=str(logs[0]))
        pid = ipp.engines[set_id].pid
        self.mpiexec.append(psutil.Process(pid))
        return [pid]

    def end_engines(self, grace: float, wait: bool) -> None:
        super().end_engines(grace, wait)
        end_processes(self.mpiexec, grace_s=max(grace, 1.0))  # it ends when its engines do
        self.mpiexec = []
