"""Every exercise checker of the course: it names each rank whose answer is wrong, and why.

Introduced in notebook 00. The notebooks import their exercises from here; each notebook's
exercises live in a module of ``helpers.exercises``. An exercise asks for a function, and
its checker runs that function on the ranks (``helpers.exercises.trial``) on inputs drawn
afresh for every check, at the cluster's world size and again on one rank fewer, with every
call it makes recorded. It then judges, rank by rank:

- the value, against what that rank should hold at that world size (so an answer right only
  at one size, such as a hard-coded 4 or a sum that happens to match, fails);
- the type and shape (an int is asked for: a float or a tensor is wrong);
- the means, where the exercise restricts them (point-to-point only, one collective, no
  communication at all, only rank 0 reads the file), from the record of calls.

``check(cluster, EXERCISE)`` prints one line when every rank is right, and raises an
AssertionError listing every problem otherwise. The inputs are random, so that no answer can
be computed from a formula instead of from the other ranks' values.
"""

from __future__ import annotations

from .exercises.checkpointing import LOAD_AND_SHARE, LOAD_WRONG_WAY, NEWEST_LOADABLE
from .exercises.cluster import COUNT_RANKS
from .exercises.collectives import MEAN_OF_ALL, RING_ALL_GATHER, TREE_BROADCAST
from .exercises.composed import check_fsdp_bytes, check_group_of, check_pick_shape
from .exercises.core import Exercise, check, describe, judge_cases, value_problem, verdict
from .exercises.ddp import ACCUMULATE, DISTRIBUTED_ACCURACY, MY_SHARD
from .exercises.debugging_hangs import RING_EXCHANGE, SKIP_TOGETHER, check_first_mismatch
from .exercises.gradient_average import GLOBAL_MEAN, IN_SYNC, WEIGHTED_AVERAGE
from .exercises.launching import check_env_for, check_node_ranks, check_rendezvous_problems
from .exercises.model_parallel import (
    COLUMN_PARALLEL_BACKWARD,
    PIPELINE_FORWARD,
    ROW_PARALLEL_FORWARD,
)
from .exercises.point_to_point import RING_SUM, SHIFT_RIGHT, SWAP_WITH_PARTNER
from .exercises.sequences_and_experts import COMBINE_PARTIALS, DISPATCH_TO_EXPERTS, RING_ATTENTION
from .exercises.sharding import GLOBAL_NORM, MY_PIECE, ZERO_SGD_STEP

__all__ = [
    "ACCUMULATE",
    "COLUMN_PARALLEL_BACKWARD",
    "COMBINE_PARTIALS",
    "COUNT_RANKS",
    "DISPATCH_TO_EXPERTS",
    "DISTRIBUTED_ACCURACY",
    "Exercise",
    "GLOBAL_MEAN",
    "GLOBAL_NORM",
    "IN_SYNC",
    "LOAD_AND_SHARE",
    "LOAD_WRONG_WAY",
    "MEAN_OF_ALL",
    "MY_PIECE",
    "MY_SHARD",
    "NEWEST_LOADABLE",
    "PIPELINE_FORWARD",
    "RING_ALL_GATHER",
    "RING_ATTENTION",
    "RING_EXCHANGE",
    "RING_SUM",
    "ROW_PARALLEL_FORWARD",
    "SHIFT_RIGHT",
    "SKIP_TOGETHER",
    "SWAP_WITH_PARTNER",
    "TREE_BROADCAST",
    "WEIGHTED_AVERAGE",
    "ZERO_SGD_STEP",
    "check",
    "check_env_for",
    "check_fsdp_bytes",
    "check_group_of",
    "check_first_mismatch",
    "check_node_ranks",
    "check_pick_shape",
    "check_rendezvous_problems",
    "describe",
    "judge_cases",
    "value_problem",
    "verdict",
]
