"""The workshop server's choices (helpers/machine/hub.py), with fake GPU and core counts: each
learner's share of the machine, the Python every account can run, and their copy of the course
(never over their own work). The hub itself, with real accounts and a browser: test_hub.py."""

from __future__ import annotations

import os
import stat

import pytest

from helpers.machine import hub


def _gpus(learners):
    return [set(map(int, learner.gpus.split(","))) if learner.gpus else set()
            for learner in learners]


@pytest.mark.parametrize("gpus, n, each", [(8, 4, 2), (8, 2, 4), (8, 3, 2), (16, 5, 3),
                                           (8, 8, 0), (8, 5, 0), (1, 1, 0), (0, 3, 0), (2, 1, 2)])
def test_gpus_are_shared_out_never_twice_and_two_or_more_each(gpus, n, each):
    names = [f"learner{i}" for i in range(n)]
    learners = hub.plan(names, ranks=4, threads=None, gpus=gpus, cores=64)
    assert [learner.name for learner in learners] == names
    given = _gpus(learners)
    assert all(len(g) == each for g in given)
    assert sum(len(g) for g in given) == len(set().union(*given)), "a GPU given twice"
    assert set().union(*given) <= set(range(gpus))
    for learner in learners:
        env = learner.environment()
        # one rank per GPU where they have GPUs; CPU ranks (no GPU visible) where they have none
        assert env["COURSE_WORLD_SIZE"] == str(each if each else 4)
        assert env["CUDA_VISIBLE_DEVICES"] == learner.gpus


@pytest.mark.parametrize("cores, n, ranks, expected", [(64, 4, 4, 4), (2, 2, 2, 1), (16, 3, 2, 2)])
def test_threads_share_the_cores_among_every_rank_of_the_class(cores, n, ranks, expected):
    learners = hub.plan([f"l{i}" for i in range(n)], ranks, None, 0, cores)
    assert {learner.threads for learner in learners} == {expected}
    assert expected * n * ranks <= max(cores, n * ranks)
    assert {learner.threads for learner in hub.plan(["a"], 4, 3, 0, cores)} == {3}


@pytest.mark.parametrize("names, ranks, threads, gpus, message", [
    ([], 4, None, 0, "no learners"),
    (["ada", "ada"], 4, None, 0, "twice"),
    (["ada"], 0, None, 0, "from 1 up"),
    (["ada"], 4, 0, 0, "from 1 up"),
])
def test_a_class_that_cannot_work_is_refused_with_what_to_change(names, ranks, threads, gpus,
                                                                  message):
    with pytest.raises(hub.HubConfigError, match=message):
        hub.plan(names, ranks, threads, gpus, 8)


def test_the_class_comes_from_the_make_variables_and_the_machines_accounts():
    env = {"COURSE_HUB_LEARNERS": "root, nobody", "COURSE_HUB_RANKS": "2", "COURSE_HUB_GPUS": "4"}
    learners = hub.class_from(env, cores=8)
    assert [(x.name, x.ranks, x.gpus) for x in learners] == [("root", 2, "0,1"),
                                                             ("nobody", 2, "2,3")]
    with pytest.raises(hub.HubConfigError, match="no account for no-such-learner-here"):
        hub.class_from({"COURSE_HUB_LEARNERS": "root no-such-learner-here"}, cores=8, gpus=0)
    with pytest.raises(hub.HubConfigError, match="COURSE_HUB_RANKS='four'"):
        hub.class_from({"COURSE_HUB_LEARNERS": "root", "COURSE_HUB_RANKS": "four"}, cores=8,
                       gpus=0)


def test_a_python_under_a_private_folder_is_not_one_every_account_can_run(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    python = private / "python3.11"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    assert not hub.readable_by_all(python)
    private.chmod(0o755)
    assert hub.readable_by_all(python) == all(p.stat().st_mode & stat.S_IXOTH
                                              for p in python.parents)
    with pytest.raises(hub.HubConfigError, match="HUB_PYTHON"):
        hub.shared_python([str(tmp_path / "absent")])


def test_the_course_is_copied_to_the_learner_without_touching_their_work(tmp_path):
    source, home = tmp_path / "course", tmp_path / "home"
    (source / "notebooks" / "solutions").mkdir(parents=True)
    (source / "notebooks" / "00.ipynb").write_text("course's 00")
    (source / "notebooks" / "solutions" / "00.ipynb").write_text("solution")
    (source / "README.md").write_text("readme")
    copied = hub.copy_course(source, home)
    assert sorted(copied) == ["README.md", "notebooks/00.ipynb", "notebooks/solutions/00.ipynb"]
    mine = home / hub.HOME_FOLDER / "notebooks" / "00.ipynb"
    mine.write_text("the learner's work")
    (source / "notebooks" / "01.ipynb").write_text("a new lesson")
    assert hub.copy_course(source, home) == ["notebooks/01.ipynb"]
    assert mine.read_text() == "the learner's work"


def test_the_helpers_beside_the_course_are_the_installed_ones_and_a_kept_link_is_kept(tmp_path):
    (tmp_path / hub.HOME_FOLDER).mkdir()
    hub.link_helpers(tmp_path)
    link = tmp_path / hub.HOME_FOLDER / "helpers"
    assert (link / "machine" / "hub.py").samefile(hub.__file__)
    hub.link_helpers(tmp_path)  # the next login: as it was
    assert link.is_symlink()


def test_tls_takes_a_certificate_and_its_key_or_neither(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("cert")
    key.write_text("key")
    assert hub.tls({}) is None
    assert hub.tls({"COURSE_HUB_SSL_CERT": str(cert), "COURSE_HUB_SSL_KEY": str(key)}) == (
        str(cert), str(key))
    with pytest.raises(hub.HubConfigError, match="both HUB_SSL_CERT and HUB_SSL_KEY"):
        hub.tls({"COURSE_HUB_SSL_CERT": str(cert)})
    with pytest.raises(hub.HubConfigError, match="cannot read"):
        hub.tls({"COURSE_HUB_SSL_CERT": str(cert), "COURSE_HUB_SSL_KEY": str(tmp_path / "no")})
