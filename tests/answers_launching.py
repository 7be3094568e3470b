"""More answers to the exercises of notebook 07, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones.

The three exercises run in the notebook itself (IN_NOTEBOOK in tests/answers.py): no world
size, so the wrong answers here are of the other kinds of issue 23: right only on the regular
cases (hosts in order, one-digit counts, one mistake per job), the wrong type, a requirement of
the text unchecked (a setting that reads as no number, the majority taken setting by setting,
equal ranks all to blame, the list sorted), side effects (the arguments, os.environ, the global
random generators) and state kept from call to call (a counter, a default argument)."""

from __future__ import annotations

from answers import ENV_FOR_RIGHT, NODE_RANKS_RIGHT, RENDEZVOUS_PROBLEMS_RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- exercise 1: env_for -------------------------------------------------------------------
IN_NOTEBOOK_ALSO_RIGHT["env_for"] = [
    ("dict() with keyword arguments, f-strings, divmod-free, all four extras", '''
def env_for(hosts, per_host, host, local_rank, port):
    world = per_host * len(hosts)
    rank = local_rank + per_host * host
    return dict(MASTER_ADDR=f"{hosts[0]}", MASTER_PORT=f"{port}", WORLD_SIZE=f"{world}",
                RANK=f"{rank}", LOCAL_RANK=f"{local_rank}", LOCAL_WORLD_SIZE=f"{per_host}",
                GROUP_RANK=f"{host}", GROUP_WORLD_SIZE=f"{len(hosts)}", ROLE_NAME="default",
                ROLE_RANK=f"{rank}", ROLE_WORLD_SIZE=f"{world}")'''),
    ("ranks from a list of all the job's workers, ints turned to strings at the end", '''
def env_for(hosts, per_host, host, local_rank, port):
    workers = [(h, w) for h in range(len(hosts)) for w in range(per_host)]
    ints = {"WORLD_SIZE": len(workers), "RANK": workers.index((host, local_rank)),
            "LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": per_host, "GROUP_RANK": host,
            "MASTER_PORT": port}
    return {"MASTER_ADDR": hosts[0], **{k: str(v) for k, v in ints.items()}}'''),
]

_COUNTER = '''
_started = 0


def env_for(hosts, per_host, host, local_rank, port):
    "torchrun starts the workers one after the other: number them as they come."
    global _started
    if host == 0 and local_rank == 0:
        _started = 0
    rank, _started = _started, _started + 1
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host)}'''

IN_NOTEBOOK_MORE_WRONG["env_for"] = [
    ("ranks counted call by call (right only when the workers come in order)", _COUNTER,
     "RANK: '"),
    ("a default dict argument, filled and returned on every call", '''
def env_for(hosts, per_host, host, local_rank, port, env={}):
    env["MASTER_ADDR"], env["MASTER_PORT"] = hosts[0], str(port)
    env["WORLD_SIZE"], env["RANK"] = str(len(hosts) * per_host), str(host * per_host + local_rank)
    env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"] = str(local_rank), str(per_host)
    env["GROUP_RANK"] = str(host)
    return env''', "the same dict it returned for 2 hosts x 4, host 0, local rank 0, and so "
                   "changed that call's answer"),
    ("each worker seeds torch with its rank, as in a training script", ENV_FOR_RIGHT.replace(
        '    return {', '    import torch\n    torch.manual_seed(host * per_host + local_rank)\n'
        '    return {'), "changed torch's random generator"),
    ("the smallest address as the master", ENV_FOR_RIGHT.replace('hosts[0]', 'min(hosts)'),
     "MASTER_ADDR: '"),
    ("the hosts sorted in place first", ENV_FOR_RIGHT.replace(
        '    return {', '    hosts.sort()\n    return {'), "changed its arguments"),
    ("a port of its own for every worker", ENV_FOR_RIGHT.replace(
        'str(port)', 'str(port + local_rank)'), "MASTER_PORT: '"),
    ("LOCAL_WORLD_SIZE and GROUP_RANK from the number of hosts", ENV_FOR_RIGHT.replace(
        '"LOCAL_WORLD_SIZE": str(per_host)', '"LOCAL_WORLD_SIZE": str(len(hosts))'),
     "LOCAL_WORLD_SIZE: '"),
    ("GROUP_WORLD_SIZE added, as the workers per host", ENV_FOR_RIGHT.replace(
        '"GROUP_RANK": str(host)}', '"GROUP_RANK": str(host), "GROUP_WORLD_SIZE": str(per_host)}'),
     "GROUP_WORLD_SIZE: '"),
    ("ROLE_NAME added, as 'worker'", ENV_FOR_RIGHT.replace(
        '"GROUP_RANK": str(host)}', '"GROUP_RANK": str(host), "ROLE_NAME": "worker"}'),
     "ROLE_NAME: 'worker' (a str), expected 'default'"),
]

# ---- exercise 2: node_ranks ----------------------------------------------------------------
IN_NOTEBOOK_ALSO_RIGHT["node_ranks"] = [
    ("a regular expression and running totals, cached", '''
import functools
import itertools
import re


@functools.lru_cache
def counts_of(text):
    counts = []
    for count, times in re.findall(r"(\\d+)(?:\\(x(\\d+)\\))?", text):
        counts += [int(count)] * int(times or 1)
    return tuple(counts)


def node_ranks(tasks_per_node, node):
    counts = counts_of(tasks_per_node)
    ends = list(itertools.accumulate(counts))
    return [*range(ends[node] - counts[node], ends[node])]'''),
    ("nodes walked until the one asked for, keyword arguments to range", '''
def node_ranks(tasks_per_node, node):
    first, seen = 0, 0
    for part in tasks_per_node.split(","):
        count, times = (part[:-1].split("(x") if part.endswith(")") else (part, "1"))
        for _ in range(int(times)):
            if seen == node:
                return list(range(first, first + int(count)))
            first, seen = first + int(count), seen + 1
    raise ValueError(f"no node {node} in {tasks_per_node!r}")'''),
]

IN_NOTEBOOK_MORE_WRONG["node_ranks"] = [
    ("numpy integers in the list", NODE_RANKS_RIGHT.replace(
        "    return list(range(first, first + counts[node]))",
        "    import numpy as np\n    return list(np.arange(first, first + counts[node]))"),
     "(a numpy.int64), expected 0 (an int)"),
    ("ranks dealt round the nodes (the cyclic distribution)", '''
def node_ranks(tasks_per_node, node):
    counts = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    return sorted(r for r in range(sum(counts)) if r % len(counts) == node)[:counts[node]]''',
     "'16(x2),12', node 0: returned [0, 3, 6, ..., 39, 42] (15 ranks)"),
    ("nodes numbered from 1", NODE_RANKS_RIGHT.replace(
        "first = sum(counts[:node])\n    return list(range(first, first + counts[node]))",
        "first = sum(counts[:node - 1])\n    return list(range(first, first + counts[node - 1]))"),
     "'16(x2),12', node 0: returned [32, 33, 34"),
    ("the list of counts parsed once, on the first call", '''
_counts = []


def node_ranks(tasks_per_node, node):
    if not _counts:
        for part in tasks_per_node.split(","):
            count, _, times = part.partition("(x")
            _counts.extend([int(count)] * (int(times.rstrip(")")) if times else 1))
    first = sum(_counts[:node])
    return list(range(first, first + _counts[node]))''', "'1(x11),2', node 0: returned "),
    ("one list object, cleared and refilled on every call", '''
_ranks = []


def node_ranks(tasks_per_node, node):
    counts = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    first = sum(counts[:node])
    _ranks[:] = range(first, first + counts[node])
    return _ranks''', "the same list it returned for '16(x2),12', node 0, and so changed"),
    ("every node before this one taken to run as many tasks", NODE_RANKS_RIGHT.replace(
        "first = sum(counts[:node])", "first = node * counts[node]"),
     "'16(x2),12', node 2: returned [24, "),
    ("every number read as a count, repeats too", '''
import re


def node_ranks(tasks_per_node, node):
    counts = [int(n) for n in re.findall(r"\\d+", tasks_per_node)]
    first = sum(counts[:node])
    return list(range(first, first + counts[node]))''', "'16(x2),12', node 1: returned [16, 17]"),
    ("its LOCAL_WORLD_SIZE set in os.environ as well", NODE_RANKS_RIGHT.replace(
        "    return list(range(first, first + counts[node]))",
        "    import os\n    os.environ['LOCAL_WORLD_SIZE'] = str(counts[node])\n"
        "    return list(range(first, first + counts[node]))"),
     "changed os.environ (LOCAL_WORLD_SIZE)"),
    ("a tuple, not a list", NODE_RANKS_RIGHT.replace(
        "return list(range(first, first + counts[node]))",
        "return tuple(range(first, first + counts[node]))"), "(a tuple), expected"),
]

# ---- exercise 3: rendezvous_problems -------------------------------------------------------
IN_NOTEBOOK_ALSO_RIGHT["rendezvous_problems"] = [
    ("statistics.mode setting by setting, sorted(set())", '''
import statistics


def read(text):
    try:
        return int(text)
    except ValueError:
        return None


def rendezvous_problems(envs):
    blame = set()
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        values = [e[key] if key == "MASTER_ADDR" else read(e[key]) for e in envs]
        usual = statistics.mode(values)
        blame |= {i for i, v in enumerate(values) if v != usual or v is None}
    size = statistics.mode(read(e["WORLD_SIZE"]) for e in envs)
    ranks = [read(e["RANK"]) for e in envs]
    for i, r in enumerate(ranks):
        if r is None or r < 0 or r >= size or ranks.count(r) > 1:
            blame.add(i)
    return sorted(blame)'''),
    ("a copy of each environment normalized first, then compared", '''
from collections import Counter


def rendezvous_problems(envs):
    def read(text):
        try:
            return int(text)
        except ValueError:
            return None

    read_envs = [{**e, **{k: read(e[k]) for k in ("MASTER_PORT", "WORLD_SIZE", "RANK")}}
                 for e in envs]
    usual = {k: Counter(e[k] for e in read_envs).most_common(1)[0][0]
             for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    ranks = Counter(e["RANK"] for e in read_envs)
    return [i for i, e in enumerate(read_envs)
            if any(e[k] is None or e[k] != v for k, v in usual.items())
            or e["RANK"] is None or not 0 <= e["RANK"] < usual["WORLD_SIZE"]
            or ranks[e["RANK"]] > 1]'''),
]

_SEPARATE_LISTS = '''
from collections import Counter


def number(text):
    try:
        return int(text)
    except ValueError:
        return None


def rendezvous_problems(envs):
    blame = []
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        values = [e[key] if key == "MASTER_ADDR" else number(e[key]) for e in envs]
        usual = Counter(values).most_common(1)[0][0]
        blame += [i for i, v in enumerate(values) if v != usual]
    size = Counter(number(e["WORLD_SIZE"]) for e in envs).most_common(1)[0][0]
    ranks = [number(e["RANK"]) for e in envs]
    blame += [i for i, r in enumerate(ranks) if r is None or not 0 <= r < size]
    taken = Counter(ranks)
    blame += [i for i, r in enumerate(ranks) if taken[r] > 1]
    return DEDUPLICATED
'''

IN_NOTEBOOK_MORE_WRONG["rendezvous_problems"] = [
    ("the world size compared as written: ' 4' is not '4'", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        'number(e["WORLD_SIZE"]))', 'e["WORLD_SIZE"])').replace(
        "    size = usual[2]", "    size = number(usual[2])"), "expected"),
    ("the digits of a rank read, whatever surrounds them: 'rank0' as 0", RENDEZVOUS_PROBLEMS_RIGHT
     .replace('ranks = [number(e["RANK"]) for e in envs]',
              'ranks = [number("".join(c for c in e["RANK"] if c.isdigit() or c == "-"))'
              ' for e in envs]'), "expected"),
    ("the most common (address, port, size) taken together", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "usual = tuple(Counter(s[i] for s in settings).most_common(1)[0][0] for i in range(3))",
        "usual = Counter(settings).most_common(1)[0][0]"),
     "4 processes, job #11: returned [1, 2, 3] (a list), expected [0, 1, 2] (a list): "
     "process 0 is to blame, process 3 is not"),
    ("equal ranks looked for among the well-configured processes only", '''
from collections import Counter


def number(text):
    try:
        return int(text)
    except ValueError:
        return None


def rendezvous_problems(envs):
    settings = [(e["MASTER_ADDR"], number(e["MASTER_PORT"]), number(e["WORLD_SIZE"]))
                for e in envs]
    usual = tuple(Counter(s[i] for s in settings).most_common(1)[0][0] for i in range(3))
    blame = [i for i, s in enumerate(settings) if s != usual]
    rest = [i for i in range(len(envs)) if i not in blame]
    ranks = {i: number(envs[i]["RANK"]) for i in rest}
    taken = Counter(ranks.values())
    blame += [i for i in rest if ranks[i] is None or not 0 <= ranks[i] < usual[2]
              or taken[ranks[i]] > 1]
    return sorted(blame)''', "8 processes, job #6: returned [0, 3] (a list), expected "
                             "[0, 1, 3] (a list): process 1 is to blame"),
    ("each rule's list in turn, not sorted", _SEPARATE_LISTS.replace(
        "DEDUPLICATED", "list(dict.fromkeys(blame))"),
     "8 processes, job #6: returned [0, 3, 1] (a list), expected [0, 1, 3] (a list): "
     "sort the indices"),
    ("each rule's list in turn, a process blamed twice", _SEPARATE_LISTS.replace(
        "DEDUPLICATED", "sorted(blame)"), "returned [0, 1, 3, 3] (a list), expected [0, 1, 3] "
     "(a list): name each process once"),
    ("int() unguarded on the settings", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        'number(e["MASTER_PORT"]), number(e["WORLD_SIZE"])',
        'int(e["MASTER_PORT"]), int(e["WORLD_SIZE"])'),
     "raised ValueError: invalid literal for int() with base 10: '"),
    ("float() for the numbers, so '6.0' reads as 6", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "return int(text)", "return int(float(text))"),
     "3 processes, job #21: returned [] (a list), expected [1] (a list): process 1 is to "
     "blame"),
    ("the ranks written back into envs as ints", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        '    ranks = [number(e["RANK"]) for e in envs]',
        '    for e in envs:\n        e["RANK"] = number(e["RANK"])\n'
        '    ranks = [e["RANK"] for e in envs]'), "changed its arguments"),
    ("a rank equal to the world size let through", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "not 0 <= rank < size", "not 0 <= rank <= size"),
     "3 processes (one missing), job #1: returned [] (a list), expected [0] (a list): "
     "process 0 is to blame"),
    ("negative ranks let through", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "not 0 <= rank < size", "rank >= size"),
     "7 processes, job #38: returned [] (a list), expected [2] (a list): process 2 is to "
     "blame"),
]
