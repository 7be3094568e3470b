"""``start_cluster()``: the course's cluster from what the notebook asks and the environment says.

Introduced in notebook 00 (its setup cell). It reads the size, backend and launcher from its
arguments, else from ``COURSE_WORLD_SIZE``, ``COURSE_BACKEND``, ``COURSE_LAUNCHER``,
``COURSE_NODES`` and ``COURSE_SBATCH`` (the choices themselves are ``topology``'s pure
functions), stops the cluster this kernel already runs, and starts a ``core.Cluster``.
"""

from __future__ import annotations

import os

from .core import Cluster
from .errors import ClusterError
from .launchers import launcher_class
from .topology import (
    choose_backend,
    choose_launcher,
    require_ranks,
    resolve_nodes,
    resolve_world_size,
)

__all__ = ["current_cluster", "start_cluster"]


def start_cluster(
    n: int | None = None,
    backend: str | None = None,
    *,
    timeout: float = 30.0,
    start_timeout: float = 60.0,
    cell_timeout: float = 120.0,
    min_ranks: int = 1,
    activate: bool = True,
    launcher: str | None = None,
    nodes: int | None = None,
    sbatch: list[str] | str | None = None,
) -> Cluster:
    """Start the course cluster (replacing one this kernel already runs) and activate %px.

    n: ranks (default $COURSE_WORLD_SIZE, else one per GPU with 2+ GPUs, else 4 CPU ranks).
    backend: 'gloo' or 'nccl' (default $COURSE_BACKEND, else nccl when every rank has a GPU).
    timeout: seconds a collective may wait before it fails (the process group's timeout).
    start_timeout: seconds the engines may take to start and register.
    cell_timeout: seconds a %%px cell may wait for the ranks before it reports who is missing.
    min_ranks: the fewest ranks the notebook's lesson makes sense with (checked before starting).
    launcher: 'local' (engines forked on this machine), 'mpi' (started by mpiexec), 'slurm'
    (a Slurm job) or 'allocation' (a step of the Slurm job this kernel runs in); default
    $COURSE_LAUNCHER, else 'allocation' inside a Slurm job ($SLURM_JOB_ID), else 'local'.
    nodes: hosts the Slurm job spreads the ranks over (default $COURSE_NODES, else, inside a
    Slurm job, its nodes, else 1).
    sbatch: extra sbatch options, e.g. ["--partition=gpu", "--time=1:00:00"], after those of
    $COURSE_SBATCH; with --gpus-per-node=K the ranks use nccl when each has a GPU.
    """
    if Cluster.current is not None:
        Cluster.current.stop()
    kind = launcher_class(choose_launcher(launcher))
    if nodes is None and not os.environ.get("COURSE_NODES", "").strip():
        nodes = kind.default_nodes()  # inside a Slurm job: its nodes
    hosts = resolve_nodes(nodes, kind.name, kind.spans_hosts)
    n_gpus = kind.gpus(sbatch, hosts)  # under Slurm: those the job asks for on each node
    world_size = require_ranks(resolve_world_size(n, n_gpus), min_ranks)
    options = kind.job_options(sbatch, world_size, hosts)
    kind.check_ready()
    chosen = choose_backend(world_size, n_gpus, backend)
    cluster = Cluster(world_size, chosen, timeout=timeout, start_timeout=start_timeout,
                      cell_timeout=cell_timeout, launcher=kind, nodes=hosts, sbatch=options)
    try:
        cluster.start(activate=activate)
    except BaseException:
        cluster.stop()
        raise
    Cluster.current = cluster
    return cluster


def current_cluster() -> Cluster:
    """The cluster this kernel is running, or a ClusterError saying how to start one."""
    if Cluster.current is None:
        raise ClusterError("no cluster is running in this kernel; run the setup cell "
                           "(cluster = start_cluster()) first")
    return Cluster.current
