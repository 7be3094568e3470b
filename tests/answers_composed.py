"""Answers to the exercises of notebook 11, for tests/test_exercises.py (gathered by
tests/answers.py and tests/answers_more.py): the worked answers, other right answers written
unlike them, and the wrong answers learners write, each with a piece of the message its
checker must give. The three exercises run in the notebook itself."""

from __future__ import annotations

GROUP_OF_RIGHT = '''
def group_of(rank, shape, axis):
    stride = 1
    for size in shape[axis + 1:]:
        stride *= size  # ranks one step apart along axis differ by the sizes after it
    first = rank - (rank // stride % shape[axis]) * stride
    return [first + i * stride for i in range(shape[axis])]
'''

FSDP_BYTES_RIGHT = '''
import math


def fsdp_bytes(shapes, dp, itemsize):
    shard = sum(math.ceil(s[0] / dp) * math.prod(s[1:]) for s in shapes)
    return 3 * (dp - 1) * shard * itemsize
'''

PICK_SHAPE_RIGHT = '''
def pick_shape(world_size, ranks_per_host, heads, layers, memory, budget):
    for pp in range(1, world_size + 1):
        for tp in range(1, world_size + 1):
            if world_size % (tp * pp) or heads % tp or ranks_per_host % tp or layers % pp:
                continue
            shape = (pp, world_size // (tp * pp), tp)
            if memory(shape) <= budget:
                return shape
    return None
'''

IN_NOTEBOOK: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- exercise 1: group_of ------------------------------------------------------------------
IN_NOTEBOOK["group_of"] = (GROUP_OF_RIGHT, [
    ("the stub", "def group_of(rank, shape, axis):\n    return [rank]",
     "returned [0] (a list), expected [0, 4]"),
    ("consecutive ranks, right on the last axis only", '''
def group_of(rank, shape, axis):
    first = rank // shape[axis] * shape[axis]
    return list(range(first, first + shape[axis]))''', "axis 0: returned"),
    ("column-major: the sizes before the axis as the stride", GROUP_OF_RIGHT.replace(
        "shape[axis + 1:]", "shape[:axis]"), "expected"),
    ("only the next size as the stride", GROUP_OF_RIGHT.replace(
        "    for size in shape[axis + 1:]:\n        stride *= size",
        "    if axis + 1 < len(shape):\n        stride = shape[axis + 1]"), "expected"),
    ("itself left out", GROUP_OF_RIGHT.replace(
        "for i in range(shape[axis])]",
        "for i in range(shape[axis]) if first + i * stride != rank]"), "expected"),
    ("a tuple, not a list", GROUP_OF_RIGHT.replace(
        "return [first + i * stride for i in range(shape[axis])]",
        "return tuple(first + i * stride for i in range(shape[axis]))"), "(a tuple)"),
    ("a range, not a list", GROUP_OF_RIGHT.replace(
        "return [first + i * stride for i in range(shape[axis])]",
        "return range(first, first + shape[axis] * stride, stride)"), "(a range)"),
])
IN_NOTEBOOK_ALSO_RIGHT["group_of"] = [
    ("coordinates by divmod, the axis's coordinate varied", '''
def group_of(rank, shape, axis):
    coords, rest = [], rank
    for size in reversed(shape):
        rest, c = divmod(rest, size)
        coords.insert(0, c)
    group = []
    for c in range(shape[axis]):
        coords[axis] = c
        r = 0
        for size, x in zip(shape, coords):
            r = r * size + x
        group.append(r)
    return sorted(group)
'''),
    ("numpy: the ranks in an array, the axis moved last", '''
import numpy as np

def group_of(rank, shape, axis):
    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    rows = np.moveaxis(ranks, axis, -1).reshape(-1, shape[axis])
    return [int(r) for r in rows[(rows == rank).any(axis=1)][0]]
'''),
]
IN_NOTEBOOK_MORE_WRONG["group_of"] = [
    ("numpy integers in the list", '''
import numpy as np

def group_of(rank, shape, axis):
    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    rows = np.moveaxis(ranks, axis, -1).reshape(-1, shape[axis])
    return list(rows[(rows == rank).any(axis=1)][0])
''', "numpy.int64"),
    ("the axis counted from the end", GROUP_OF_RIGHT.replace(
        "def group_of(rank, shape, axis):\n", "def group_of(rank, shape, axis):\n"
        "    axis = len(shape) - 1 - axis\n"), "expected"),
    ("every group along the axis, not this rank's", '''
def group_of(rank, shape, axis):
    from helpers.mesh import axis_groups
    return axis_groups(shape, axis)''', "expected"),
    ("the group wraps round from the rank itself: not sorted", GROUP_OF_RIGHT.replace(
        "    return [first + i * stride for i in range(shape[axis])]",
        "    me = (rank - first) // stride\n"
        "    return [first + (me + i) % shape[axis] * stride for i in range(shape[axis])]"),
     "expected"),
]

# ---- exercise 2: fsdp_bytes ----------------------------------------------------------------
IN_NOTEBOOK["fsdp_bytes"] = (FSDP_BYTES_RIGHT, [
    ("the stub", "def fsdp_bytes(shapes, dp, itemsize):\n    return 0",
     "returned 0 (an int), expected 76224"),
    ("no padding: the exact share of the elements", '''
import math

def fsdp_bytes(shapes, dp, itemsize):
    numel = sum(math.prod(s) for s in shapes)
    return 3 * (dp - 1) * numel * itemsize // dp''', "expected"),
    ("the flat total padded, not each parameter", '''
import math

def fsdp_bytes(shapes, dp, itemsize):
    numel = sum(math.prod(s) for s in shapes)
    return 3 * (dp - 1) * math.ceil(numel / dp) * itemsize''', "expected"),
    ("one all-gather forgotten (the backward's)", FSDP_BYTES_RIGHT.replace("3 * (dp - 1)",
                                                                           "2 * (dp - 1)"),
     "expected"),
    ("dp shards sent, not dp - 1", FSDP_BYTES_RIGHT.replace("3 * (dp - 1)", "3 * dp"),
     "expected"),
    ("rows rounded down", FSDP_BYTES_RIGHT.replace("math.ceil(s[0] / dp)", "(s[0] // dp)"),
     "expected"),
    ("a float", FSDP_BYTES_RIGHT.replace("math.ceil(s[0] / dp)", "(s[0] / dp)"), "(a float)"),
])
IN_NOTEBOOK_ALSO_RIGHT["fsdp_bytes"] = [
    ("integer ceiling, a loop, the three collectives added one by one", '''
def fsdp_bytes(shapes, dp, itemsize):
    shard = 0
    for shape in shapes:
        rows = -(-shape[0] // dp)
        numel = rows
        for size in shape[1:]:
            numel *= size
        shard += numel * itemsize
    gather = (dp - 1) * shard
    return gather + gather + (dp - 1) * shard
'''),
]
IN_NOTEBOOK_MORE_WRONG["fsdp_bytes"] = [
    ("the bytes forgotten: elements", FSDP_BYTES_RIGHT.replace(" * itemsize", ""),
     "expected"),
    ("each parameter's elements padded, not its rows", FSDP_BYTES_RIGHT.replace(
        "math.ceil(s[0] / dp) * math.prod(s[1:])", "math.ceil(math.prod(s) / dp)"),
     "expected"),
    ("the whole unit gathered per rank, not a shard", FSDP_BYTES_RIGHT.replace(
        "math.ceil(s[0] / dp) * math.prod(s[1:])", "s[0] * math.prod(s[1:])"), "expected"),
]

# ---- exercise 3: pick_shape ----------------------------------------------------------------
IN_NOTEBOOK["pick_shape"] = (PICK_SHAPE_RIGHT, [
    ("the stub", "def pick_shape(world_size, ranks_per_host, heads, layers, memory, budget):\n"
     "    return (1, world_size, 1)", "expected None"),
    ("the budget strictly above", PICK_SHAPE_RIGHT.replace("<= budget", "< budget"),
     "expected"),
    ("tensor parallelism across hosts", PICK_SHAPE_RIGHT.replace(" or ranks_per_host % tp", ""),
     "expected"),
    ("heads split", PICK_SHAPE_RIGHT.replace(" or heads % tp", ""), "expected"),
    ("stages of unequal length", PICK_SHAPE_RIGHT.replace(" or layers % pp", ""), "expected"),
    ("the smallest tp first, then pp", PICK_SHAPE_RIGHT.replace(
        "    for pp in range(1, world_size + 1):\n        for tp in range(1, world_size + 1):",
        "    for tp in range(1, world_size + 1):\n        for pp in range(1, world_size + 1):"),
     "expected"),
    ("a list, not a tuple", PICK_SHAPE_RIGHT.replace("return shape\n", "return list(shape)\n"),
     "(a list)"),
])
IN_NOTEBOOK_ALSO_RIGHT["pick_shape"] = [
    ("every valid shape listed, the fitting ones sorted by (pp, tp)", '''
def pick_shape(world_size, ranks_per_host, heads, layers, memory, budget):
    shapes = [(pp, dp, world_size // (pp * dp)) for pp in range(1, world_size + 1)
              for dp in range(1, world_size + 1) if world_size % (pp * dp) == 0]
    fits = [s for s in shapes if heads % s[2] == 0 and ranks_per_host % s[2] == 0
            and layers % s[0] == 0 and memory(s) <= budget]
    return min(fits, key=lambda s: (s[0], s[2])) if fits else None
'''),
]
IN_NOTEBOOK_MORE_WRONG["pick_shape"] = [
    ("the shape with the least memory", '''
def pick_shape(world_size, ranks_per_host, heads, layers, memory, budget):
    shapes = [(pp, world_size // (pp * tp), tp) for tp in range(1, world_size + 1)
              for pp in range(1, world_size + 1) if world_size % (pp * tp) == 0
              and heads % tp == 0 and ranks_per_host % tp == 0 and layers % pp == 0]
    best = min(shapes, key=memory)
    return best if memory(best) <= budget else None''', "expected"),
    ("memory asked with (tp, pp, dp)", PICK_SHAPE_RIGHT.replace(
        "if memory(shape) <= budget:", "if memory((tp, pp, world_size // (tp * pp))) <= budget:"),
     "expected"),
    ("returned as (dp, tp, pp)", PICK_SHAPE_RIGHT.replace(
        "                return shape", "                return (shape[1], shape[2], shape[0])"),
     "expected"),
    ("tp limited to the heads only when they are even", PICK_SHAPE_RIGHT.replace(
        " or heads % tp", " or (heads % 2 == 0 and heads % tp)"), "expected"),
]
