"""The machinery that runs the course's cluster; a learner never needs to open it.

- ``start``: ``start_cluster()``, which reads what the notebook and the environment ask for;
- ``core``: the ``Cluster`` (start, re-form the group, restart, stop);
- ``topology``: pure choices (world size, backend, devices, launcher, Slurm options);
- ``launchers/``: how engines are started, one class per launcher (``local``, ``mpi``,
  ``slurm``) on one base (``base``), and the name-to-class registry (its ``__init__``);
- ``forkserver``: the warm process local engines are forked from;
- ``controller``: the ipyparallel controller and its Unix sockets;
- ``engine``: the code that runs inside each engine (join and leave the group);
- ``px``, ``replies``, ``magics`` and ``interrupts``: the ``%%px`` magic, its bounded waits,
  what the ranks' replies say, and the stop button;
- ``watchdog``: the guard that ends a cluster whose kernel died;
- ``stacks``: each rank's stack, read from outside while it hangs;
- ``errors``: ``ClusterError`` and the advice a failed start gives.
"""

from .core import Cluster, ClusterError, RankInfo
from .start import current_cluster, start_cluster

__all__ = ["Cluster", "ClusterError", "RankInfo", "current_cluster", "start_cluster"]
