"""The exercises of notebook 07 (from notebook to job): their inputs, right answers and rules.

They run in the notebook itself, not on ranks: each checker calls the learner's function on
many made-up cases and names the first ones it gets wrong. Beyond the value, it checks that
the function left its inputs, this process's environment (os.environ) and the global random
generators as they were, and that each call gave a value of its own (not one object that the
next call changes)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .core import describe, value_problem
from .in_notebook import judge_in_notebook

# ---- exercise 1: what torchrun sets ------------------------------------------------------

ENV_KEYS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "GROUP_RANK")
# the other variables of section 4 that follow from the same inputs: allowed, and then checked
ENV_EXTRAS = ("ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "GROUP_WORLD_SIZE")


def _launch_env(hosts: Sequence[str], per_host: int, host: int, local_rank: int,
                port: int) -> dict[str, str]:
    """Every variable torchrun's static rendezvous gives this worker that the inputs decide."""
    rank, world = host * per_host + local_rank, len(hosts) * per_host
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "RANK": str(rank), "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
            "ROLE_NAME": "default", "GROUP_WORLD_SIZE": str(len(hosts))}


def env_problem(got: Any, right: dict[str, str]) -> str | None:
    """What is wrong with got: the seven keys are required, the four extras allowed."""
    if not isinstance(got, dict):
        return f"{describe(got)}, expected a dict with the keys {list(ENV_KEYS)}"
    if missing := [k for k in ENV_KEYS if k not in got]:
        return f"a dict without {missing}"
    if unknown := sorted(str(k) for k in got if k not in right):
        return (f"a dict with {unknown}: torchrun gives this worker no such variable that "
                f"these inputs decide (besides the seven, only {list(ENV_EXTRAS)} may be added)")
    for key in [*ENV_KEYS, *ENV_EXTRAS]:
        if key in got and (wrong := value_problem(got[key], right[key])) is not None:
            return f"{key}: {wrong}"
    return None


def _host_names(gen: random.Random, count: int) -> list[str]:
    """count distinct host addresses in no particular order: IPv4 addresses or node names."""
    names: set[str] = set()
    while len(names) < count:
        ip = f"10.{gen.randint(0, 255)}.{gen.randint(0, 255)}.{gen.randint(1, 254)}"
        names.add(gen.choice([ip, f"node{gen.randint(1, 999):03d}", f"gpu-{gen.randint(1, 4096)}"]))
    found = sorted(names)
    gen.shuffle(found)
    return found


def env_cases(trials: int = 12) -> list[tuple[str, tuple, dict[str, str]]]:
    """Every process of jobs of 1 to 5 hosts (random addresses) and 1 to 8 processes per host
    (the first job has 2 hosts of 4, a size where a few wrong formulas agree with the right one).
    The first job's processes come in order, the others' in any: a function that counts its
    calls to number the ranks is wrong, as it would be when torchrun starts them."""
    gen, cases = random.Random(7), []
    for job in range(trials):
        n_hosts, per_host = (2, 4) if job == 0 else (gen.randint(1, 5), gen.randint(1, 8))
        hosts = _host_names(gen, n_hosts)
        port = gen.randint(20000, 60000)
        workers = [(host, local) for host in range(n_hosts) for local in range(per_host)]
        if job > 0:  # a generator of its own: the jobs stay those of the stored outputs
            random.Random(job).shuffle(workers)
        for host, local in workers:
            args = (hosts, per_host, host, local, port)
            cases.append((f"{n_hosts} host{'s' * (n_hosts > 1)} x {per_host}, host {host}, "
                          f"local rank {local}", args, _launch_env(*args)))
    return cases


def check_env_for(env_for: Callable[..., Any]) -> None:
    """Notebook 07, exercise 1: the environment torchrun gives one worker of a job."""
    judge_in_notebook("env_for", env_for, env_cases(), "processes of 12 jobs of 1 to 5 hosts",
                      env_problem)


# ---- exercise 2: Slurm's task layout -------------------------------------------------------

def tasks_per_node_text(counts: Sequence[int]) -> str:
    """SLURM_TASKS_PER_NODE for these counts, node by node: [2, 2, 2, 1] -> '2(x3),1'."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(parts)


# task counts seen on real nodes: one digit and several (GPUs, cores per node)
TASK_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)


def node_rank_cases(trials: int = 15) -> list[tuple[str, tuple, list[int]]]:
    """Every node of allocations of 1 to 36 nodes, with runs of equal counts (the 'x' form).
    The first two always have counts and repeats of two digits: '16(x2),12', '1(x11),2'."""
    gen, allocations = random.Random(11), [[16, 16, 12], [1] * 11 + [2]]
    while len(allocations) < trials:
        counts: list[int] = []
        for _ in range(gen.randint(1, 3)):
            count = gen.choice([c for c in TASK_COUNTS if not counts or c != counts[-1]])
            counts += [count] * gen.choice([1, 1, 2, 3, 10, 12])
        if counts not in allocations:
            allocations.append(counts)
    cases = []
    for counts in allocations:
        text = tasks_per_node_text(counts)
        for node, count in enumerate(counts):
            first = sum(counts[:node])
            cases.append((f"{text!r}, node {node}", (text, node),
                          list(range(first, first + count))))
    return cases


def _ranks(ranks: list[int]) -> str:
    """A list of ranks for a message, its ends only when it is long: '[0, 1, 2, ..., 15]'."""
    if len(ranks) <= 12:
        return str(ranks)
    return f"[{', '.join(map(str, ranks[:3]))}, ..., {', '.join(map(str, ranks[-2:]))}] " \
           f"({len(ranks)} ranks)"


def ranks_problem(got: Any, right: list[int]) -> str | None:
    """What is wrong with got, a node's ranks: both lists shown, long ones by their ends."""
    if (problem := value_problem(got, right)) is None:
        return None
    if type(got) is not list:
        return f"{describe(got)}, expected a list: {_ranks(right)}"
    if all(type(r) is int for r in got):
        return f"{_ranks(got)}, expected {_ranks(right)}"
    return problem  # items of another type: the first one named


def check_node_ranks(node_ranks: Callable[[str, int], Any]) -> None:
    """Notebook 07, exercise 2: the global ranks Slurm places on one node."""
    judge_in_notebook("node_ranks", node_ranks, node_rank_cases(), "nodes of 15 allocations",
                      ranks_problem)


# ---- exercise 3: why won't it start? -------------------------------------------------------

def _number(text: str) -> int | None:
    """The number int() reads in text, as env:// reads RANK, WORLD_SIZE and MASTER_PORT."""
    try:
        return int(text)
    except ValueError:
        return None


def _blame(envs: Sequence[dict[str, str]]) -> list[int]:
    """The right answer: the indices of the processes to blame, sorted."""
    settings = [(e["MASTER_ADDR"], _number(e["MASTER_PORT"]), _number(e["WORLD_SIZE"]))
                for e in envs]
    usual = tuple(Counter(s[i] for s in settings).most_common(1)[0][0] for i in range(3))
    ranks = [_number(e["RANK"]) for e in envs]
    taken = Counter(ranks)
    return [i for i, (s, r) in enumerate(zip(settings, ranks))
            if s != usual or r is None or not 0 <= r < usual[2] or taken[r] > 1]


def _clear_majority(envs: Sequence[dict[str, str]]) -> bool:
    """Whether each setting has one most common value (as int() reads the numbers)."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        read = [e[key] if key == "MASTER_ADDR" else _number(e[key]) for e in envs]
        top = Counter(read).most_common(2)
        if top[0][0] is None or (len(top) > 1 and top[0][1] == top[1][1]):
            return False
    return True


def _respelled(gen: random.Random, value: str) -> str:
    """The same number written another way that int() reads alike: '+7', '07', ' 7'."""
    return gen.choice([f"+{value}", f"0{value}", f" {value}"])


MISTAKES = ("duplicate", "out of range", "not a number", "respelled", "respelled duplicate",
            "port", "addr", "world size", "respelled setting", "setting not a number",
            "duplicate of a misconfigured one", "settings scattered")
SETTINGS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")


def _misconfigure(gen: random.Random, env: dict[str, str], key: str, size: int) -> None:
    """Give one process another value of one setting."""
    if key == "MASTER_PORT":
        env[key] = str(int(env[key]) + gen.randint(1, 9))
    elif key == "MASTER_ADDR":
        env[key] = f"10.{gen.randint(0, 255)}.1.{gen.randint(2, 250)}"
    else:
        env[key] = str(size + gen.choice([-1, 1]))


def planted_envs(seed: int) -> tuple[list[dict[str, str]], list[int]]:
    """The environments of the processes of one job, with zero to two planted mistakes and
    sometimes one process missing, and the right answer. Every third job misses a process;
    the kinds of mistake take turns, so each is planted in several of the first jobs. A
    "settings scattered" job has 3 or 4 processes, three of them each with one setting wrong
    (the first among them): the most common (address, port, size) taken together is then not
    the job's, which is taken setting by setting."""
    gen = random.Random(seed)
    scattered = MISTAKES[seed % len(MISTAKES)] == "settings scattered" and seed % 5 != 4
    while True:
        size = gen.randint(3, 8) if seed % 3 == 1 else gen.randint(2, 8)
        if scattered:
            size = gen.randint(3, 4) + (seed % 3 == 1)
        addr, port = f"10.{gen.randint(0, 255)}.{gen.randint(0, 255)}.{gen.randint(2, 250)}", \
            gen.randint(20000, 60000)
        envs = [{"MASTER_ADDR": addr, "MASTER_PORT": str(port), "WORLD_SIZE": str(size),
                 "RANK": str(r)} for r in range(size)]
        gen.shuffle(envs)  # processes start in any order
        if seed % 3 == 1:
            envs.pop(gen.randrange(size))  # a process that never started
        count = 0 if seed % 5 == 4 else 1 + (len(envs) >= 5 and gen.random() < 0.4)
        for k in range(count):
            kind = MISTAKES[(seed + 4 * k) % len(MISTAKES)]
            turn = (seed + 4 * k) // len(MISTAKES)  # how many jobs met this kind before
            i = gen.randrange(len(envs))
            other = (i + gen.randint(1, len(envs) - 1)) % len(envs) if len(envs) > 1 else i
            if kind == "port":
                envs[i]["MASTER_PORT"] = str(port + gen.randint(1, 9))
            elif kind == "addr":
                envs[i]["MASTER_ADDR"] = f"10.{gen.randint(0, 255)}.1.{gen.randint(2, 250)}"
            elif kind == "world size":
                envs[i]["WORLD_SIZE"] = str(size + gen.choice([-1, 1]))
            elif kind == "respelled setting":  # the port and the size in turn, job by job
                key = ("MASTER_PORT", "WORLD_SIZE")[turn % 2]
                envs[i][key] = _respelled(gen, envs[i][key])
            elif kind == "setting not a number":  # a variable never expanded, a float, nothing
                key = ("WORLD_SIZE", "MASTER_PORT")[turn % 2]
                envs[i][key] = (f"${key}", f"{envs[i][key]}.0", "")[turn % 3]
            elif kind == "duplicate of a misconfigured one":
                _misconfigure(gen, envs[i], gen.choice(SETTINGS), size)
                envs[other]["RANK"] = envs[i]["RANK"]
            elif kind == "settings scattered":
                wrong = [0, *gen.sample(range(1, len(envs)), 2)] if len(envs) >= 3 else []
                for j, key in zip(wrong, gen.sample(SETTINGS, 3)):
                    _misconfigure(gen, envs[j], key, size)
            elif kind == "duplicate":
                envs[i]["RANK"] = envs[other]["RANK"]
            elif kind == "respelled duplicate":
                envs[i]["RANK"] = _respelled(gen, envs[other]["RANK"])
            elif kind == "respelled":
                envs[i]["RANK"] = _respelled(gen, envs[i]["RANK"])
            elif kind == "out of range":
                envs[i]["RANK"] = str(size + gen.randint(0, 2))
            else:  # each spelling in turn, job by job
                envs[i]["RANK"] = ("rank0", "", "1.0", "-1", "one")[turn % 5]
        if len(envs) >= 2 and _clear_majority(envs):
            return envs, _blame(envs)  # computed from the result: a second mistake may undo a first


def _processes(indices: list[int], verb: str) -> str:
    return (f"process {indices[0]} {verb}" if len(indices) == 1
            else f"processes {', '.join(map(str, indices))} {verb.replace('is', 'are', 1)}")


def blame_problem(got: Any, right: list[int]) -> str | None:
    """What is wrong with got, the indices blamed: which are missing, which are not to blame,
    or that they are not sorted or not each once."""
    if (problem := value_problem(got, right)) is None:
        return None
    if type(got) is not list or not all(type(i) is int for i in got):
        return problem
    said = f"{describe(got)}, expected {describe(right)}"
    if sorted(set(got)) == right:
        return said + (": name each process once" if len(set(got)) < len(got)
                       else ": sort the indices")
    hints = []
    if missed := sorted(set(right) - set(got)):
        hints.append(_processes(missed, "is to blame"))
    if wrongly := sorted(set(got) - set(right)):
        hints.append(_processes(wrongly, "is not to blame"))
    return f"{said}: {', '.join(hints)}"


def check_rendezvous_problems(rendezvous_problems: Callable[[list], Any], trials: int = 40) -> None:
    """Notebook 07, exercise 3: which processes of a job stop its rendezvous."""
    cases = []
    for seed in range(trials):
        envs, right = planted_envs(seed)
        missing = " (one missing)" if seed % 3 == 1 else ""
        cases.append((f"{len(envs)} processes{missing}, job #{seed}", (envs,), right))
    judge_in_notebook("rendezvous_problems", rendezvous_problems, cases,
                      "planted jobs of 2 to 8 processes, some with one process missing",
                      blame_problem)
