"""How a cluster's engines start, stop and are reached: one class per launcher.

Introduced in notebook 00 (``start_cluster()``). ``LocalLauncher`` (``local``), the default,
forks the engines from a warm process on this machine; ``MpiLauncher`` (``mpi``) starts them
with one ``mpiexec``; ``SlurmLauncher`` (``slurm``) runs them as a Slurm job spread over
nodes; ``AllocationLauncher`` (``allocation``) as one step of the Slurm job the notebook
itself runs in. What they share is in ``base``; ``launcher_class`` below is the one place
that turns a launcher's name (``launcher=``, ``COURSE_LAUNCHER``) into its class.
"""

from __future__ import annotations

from .allocation import AllocationLauncher
from .base import ClusterView, Launcher, RankInfo, log_tail
from .local import LocalLauncher
from .mpi import MpiLauncher
from .slurm import SlurmLauncher

LAUNCHER_CLASSES: dict[str, type[Launcher]] = {
    cls.name: cls for cls in (LocalLauncher, MpiLauncher, SlurmLauncher, AllocationLauncher)}


def launcher_class(name: str) -> type[Launcher]:
    """The class of the launcher of this name (one of topology.LAUNCHERS)."""
    return LAUNCHER_CLASSES[name]


__all__ = ["AllocationLauncher", "ClusterView", "Launcher", "LocalLauncher", "MpiLauncher",
           "RankInfo",
           "SlurmLauncher", "launcher_class", "log_tail"]
