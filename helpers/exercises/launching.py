"""The exercises of notebook 07 (from notebook to job):
their inputs, right answers and rules."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

from .core import judge_cases


def _launch_env(hosts: Sequence[str], per_host: int, host: int, local_rank: int,
                port: int) -> dict[str, str]:
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host)}


def env_cases(trials: int = 12) -> list[tuple[str, tuple, dict[str, str]]]:
    """Every process of jobs of 1 to 5 hosts and 1 to 8 processes per host (the first job has
    2 hosts of 4, a size where a few wrong formulas happen to agree with the right one)."""
    gen, cases = random.Random(7), []
    for job in range(trials):
        n_hosts, per_host = (2, 4) if job == 0 else (gen.randint(1, 5), gen.randint(1, 8))
        hosts = [f"10.1.{job}.{10 + 3 * h}" for h in range(n_hosts)]
        port = gen.randint(20000, 60000)
        for host in range(n_hosts):
            for local in range(per_host):
                args = (hosts, per_host, host, local, port)
                cases.append((f"{n_hosts} hosts x {per_host}, host {host}, local rank {local}",
                              args, _launch_env(*args)))
    return cases


def check_env_for(env_for: Callable[..., Any]) -> None:
    """Notebook 07, exercise 1: the environment a launcher gives one process of a job."""
    judge_cases("env_for", env_for, env_cases(), "processes of 12 jobs of 1 to 5 hosts")


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


def node_rank_cases(trials: int = 15) -> list[tuple[str, tuple, list[int]]]:
    """Every node of allocations of 1 to 6 nodes, with runs of equal counts (the 'x' form)."""
    gen, cases = random.Random(11), []
    for _ in range(trials):
        counts: list[int] = []
        while len(counts) < gen.randint(1, 6):
            counts += [gen.randint(1, 8)] * gen.randint(1, 3)
        text = tasks_per_node_text(counts)
        for node, count in enumerate(counts):
            first = sum(counts[:node])
            right = list(range(first, first + count))
            cases.append((f"{text!r}, node {node}", (text, node), right))
    return cases


def check_node_ranks(node_ranks: Callable[[str, int], Any]) -> None:
    """Notebook 07, exercise 2: the global ranks Slurm places on one node."""
    judge_cases("node_ranks", node_ranks, node_rank_cases(), "nodes of 15 allocations")


def planted_envs(seed: int) -> tuple[list[dict[str, str]], list[int]]:
    """The environments of the processes of one job, with zero, one or two planted mistakes,
    and the right answer: the sorted indices of the processes to blame."""
    gen = random.Random(seed)
    size = gen.randint(2, 8)
    addr, port = f"10.2.0.{gen.randint(2, 250)}", gen.randint(20000, 60000)
    envs = [{"MASTER_ADDR": addr, "MASTER_PORT": str(port), "WORLD_SIZE": str(size),
             "RANK": str(r)} for r in range(size)]
    gen.shuffle(envs)  # processes start in any order
    kinds = ["duplicate", "out of range", "not a number"]
    if size >= 3:  # with two processes a changed setting leaves no majority to judge by
        kinds += ["port", "addr", "world size"]
    for _ in range(0 if seed % 5 == 4 else gen.randint(1, 2 if size >= 5 else 1)):
        i = gen.randrange(size)
        kind = gen.choice(kinds)
        if kind == "port":
            envs[i]["MASTER_PORT"] = str(port + gen.randint(1, 9))
        elif kind == "addr":
            envs[i]["MASTER_ADDR"] = f"10.2.1.{gen.randint(2, 250)}"
        elif kind == "world size":
            envs[i]["WORLD_SIZE"] = str(size + gen.choice([-1, 1]))
        elif kind == "duplicate":
            other = (i + gen.randint(1, size - 1)) % size
            envs[i]["RANK"] = envs[other]["RANK"]
        elif kind == "out of range":
            envs[i]["RANK"] = str(size + gen.randint(0, 2))
        else:
            envs[i]["RANK"] = gen.choice(["", "rank0", "1.0", "-1"])
    return envs, _blame(envs)  # computed from the result: a second mistake may undo a first


def _blame(envs: Sequence[dict[str, str]]) -> list[int]:
    from collections import Counter

    usual = {k: Counter(e[k] for e in envs).most_common(1)[0][0]
             for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    size = int(usual["WORLD_SIZE"])
    ranks = Counter(e["RANK"] for e in envs)
    return [i for i, e in enumerate(envs)
            if any(e[k] != v for k, v in usual.items())
            or not (e["RANK"].isdigit() and int(e["RANK"]) < size) or ranks[e["RANK"]] > 1]


def check_rendezvous_problems(rendezvous_problems: Callable[[list], Any], trials: int = 40) -> None:
    """Notebook 07, exercise 3: which processes of a job stop its rendezvous."""
    cases = []
    for seed in range(trials):
        envs, right = planted_envs(seed)
        cases.append((f"{len(envs)} processes, job #{seed}", (copy.deepcopy(envs),), right))
    judge_cases("rendezvous_problems", rendezvous_problems, cases,
                "planted jobs of 2 to 8 processes")
