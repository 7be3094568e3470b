"""The course's helpers. What the notebooks import sits here, at the top, named after what
it teaches (each module's docstring names the notebook that introduces it); the machinery
that runs the cluster and judges the exercises lives in the subpackages (README: "What is in
helpers/").
"""

from .calls import table as calltable
from .calls import trace as calltrace
from .cluster import Cluster, ClusterError, RankInfo, current_cluster, start_cluster
from .cluster.px import RankError
from .cluster.topology import ClusterConfigError, second_gpu

__all__ = [
    "Cluster",
    "ClusterConfigError",
    "ClusterError",
    "RankError",
    "RankInfo",
    "calltable",
    "calltrace",
    "current_cluster",
    "second_gpu",
    "start_cluster",
]
