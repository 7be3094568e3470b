"""The machinery that runs the course's cluster; a learner never needs to open it.

- ``core``: the ``Cluster`` (start, re-form the group, restart, stop) and ``start_cluster()``;
- ``launchers``, ``mpi``, ``slurm``: how engines are started, one class per launcher;
- ``forkserver``: the warm process local engines are forked from;
- ``engine``: the code that runs inside each engine (join and leave the group);
- ``px`` and ``interrupts``: the ``%%px`` magic, its bounded waits and the stop button;
- ``watchdog``: the guard that ends a cluster whose kernel died;
- ``stacks``: each rank's stack, read from outside while it hangs.
"""

from .core import Cluster, ClusterError, RankInfo, current_cluster, start_cluster

__all__ = ["Cluster", "ClusterError", "RankInfo", "current_cluster", "start_cluster"]
