"""Shared plumbing for the distributed PyTorch course; each module names its notebook."""

from .cluster import Cluster, ClusterError, RankInfo, current_cluster, start_cluster
from .cluster.px import RankError
from .topology import ClusterConfigError

__all__ = [
    "Cluster",
    "ClusterConfigError",
    "ClusterError",
    "RankError",
    "RankInfo",
    "current_cluster",
    "start_cluster",
]
