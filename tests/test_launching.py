"""Notebook 07's exercise checkers (helpers/exercises/launching.py): right answers written
another way pass, and the made-up cases hold what the exercises' texts promise to try.
The planted wrong answers are in tests/answers.py (IN_NOTEBOOK), run by test_exercises.py.
Also the notebook's port helper, helpers.jobs.launch.free_ports."""

from __future__ import annotations

import os

import pytest
from answers import IN_NOTEBOOK, define

from helpers.exercises import launching
from helpers.jobs.launch import free_ports

OTHER_RIGHT_ENV_FOR = {
    "with the four other variables the inputs decide": '''
def env_for(hosts, per_host, host, local_rank, port):
    rank, world = host * per_host + local_rank, len(hosts) * per_host
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "RANK": str(rank), "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
            "ROLE_NAME": "default", "GROUP_WORLD_SIZE": str(len(hosts))}''',
    "built key by key, with ROLE_RANK": '''
def env_for(hosts, per_host, host, local_rank, port):
    env = {}
    env["GROUP_RANK"] = str(host)
    env["LOCAL_RANK"] = str(local_rank)
    env["RANK"] = env["ROLE_RANK"] = str(sum([per_host] * host) + local_rank)
    env["LOCAL_WORLD_SIZE"] = str(per_host)
    env["WORLD_SIZE"] = str(per_host * len(hosts))
    env.update(MASTER_ADDR=hosts[0], MASTER_PORT=f"{port}")
    return env''',
}


@pytest.mark.parametrize("what", sorted(OTHER_RIGHT_ENV_FOR))
def test_env_for_written_another_way_passes(what, capsys):
    launching.check_env_for(define(OTHER_RIGHT_ENV_FOR[what], "env_for"))
    assert "env_for: right on" in capsys.readouterr().out


def test_env_for_cases_have_irregular_hosts():
    hosts = {tuple(args[0]) for _, args, _ in launching.env_cases()}
    assert len(hosts) == 12, "every job has hosts of its own"
    assert any(h != tuple(sorted(h)) for h in hosts), "some jobs list their hosts unsorted"
    assert any(not h[0][0].isdigit() for h in hosts), "some hosts are names, not addresses"


def test_a_checker_puts_back_the_environment_a_wrong_answer_changed():
    wrong = define(IN_NOTEBOOK["env_for"][0] + "\nimport os\n_f = env_for\n"
                    "def env_for(*a):\n    os.environ['RANK'] = '99'\n    return _f(*a)\n",
                    "env_for")
    before = dict(os.environ)
    with pytest.raises(AssertionError, match="changed os.environ"):
        launching.check_env_for(wrong)
    assert dict(os.environ) == before


def test_node_rank_cases_have_counts_and_repeats_of_several_digits():
    texts = {args[0] for _, args, _ in launching.node_rank_cases()}
    assert len(texts) == 15, "15 different allocations"
    assert {"16(x2),12", "1(x11),2"} <= texts
    assert any("(x1" in t and "(x1)" not in t for t in texts), "a repeat of two digits"


def test_planted_jobs_miss_processes_and_plant_every_kind_of_mistake():
    missing = 0
    for seed in range(40):
        envs, right = launching.planted_envs(seed)
        sizes = {launching._number(e["WORLD_SIZE"]) for e in envs}
        missing += seed % 3 == 1 and len(envs) < max(s for s in sizes if s is not None)
        assert right == sorted(right)
    assert missing >= 10, f"{missing} jobs with a process missing"
    respelled = [e["RANK"] for seed in range(40) for e in launching.planted_envs(seed)[0]
                 if e["RANK"] != e["RANK"].strip() or e["RANK"][:1] in "+0" and len(e["RANK"]) > 1]
    assert len(respelled) >= 4, f"ranks written another way: {respelled}"


def test_free_ports_are_different_and_free():
    import socket

    ports = free_ports(3)
    assert len(set(ports)) == 3, ports
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
