"""Every exercise checker on real ranks: it passes the right answer, at two world sizes, and
fails each planted wrong answer with a message that says what is wrong (tests/answers.py)."""

from __future__ import annotations

import dataclasses

import pytest
from answers import IN_NOTEBOOK, RIGHT, WRONG, define
from answers_more import ALSO_RIGHT, IN_NOTEBOOK_ALSO_RIGHT, IN_NOTEBOOK_MORE_WRONG, MORE_WRONG
from answers_sharding import PADDINGS

from helpers import checks

EXERCISES = {e.name: e for e in vars(checks).values() if isinstance(e, checks.Exercise)}
SEED = 1000  # fixed, so that a planted answer fails the same way every run
# planted deadlocks are found by the groups' timeout: a short one here (learners get 4-5 s)
QUICK = 1.5


def test_every_exercise_has_a_right_answer_and_wrong_ones():
    assert sorted(EXERCISES) == sorted(RIGHT) == sorted(WRONG)
    assert all(len(WRONG[name]) >= 2 for name in WRONG)


def test_every_exercise_has_another_right_answer_and_8_wrong_ones():
    """Issue 23's standard: each checker is tried with at least 8 distinct wrong answers, some
    at 2 ranks, and with a right answer written unlike the worked solution."""
    assert sorted(ALSO_RIGHT) == sorted(MORE_WRONG) == sorted(EXERCISES)
    for name in EXERCISES:
        planted = WRONG[name] + MORE_WRONG[name]
        assert len({p[1] for p in planted}) >= 8 and ALSO_RIGHT[name], name
        assert 2 in {p[3] if len(p) > 3 else 3 for p in planted}, f"{name}: none at 2 ranks"
    assert sorted(IN_NOTEBOOK_ALSO_RIGHT) == sorted(IN_NOTEBOOK_MORE_WRONG) == sorted(IN_NOTEBOOK)
    for name, (_, wrong) in IN_NOTEBOOK.items():
        distinct = {p[1] for p in wrong + IN_NOTEBOOK_MORE_WRONG[name]}
        assert len(distinct) >= 8 and IN_NOTEBOOK_ALSO_RIGHT[name], name


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_the_right_answer_passes_at_two_world_sizes(cluster3, name, capsys):
    cluster3.px(RIGHT[name])
    checks.check(cluster3, EXERCISES[name], seed=SEED)
    assert f"{name}: right on all 3 ranks, and again on 2 ranks alone" in capsys.readouterr().out


ALSO = [(name, what, source, size) for name, right in ALSO_RIGHT.items()
        for what, source in right for size in (3, 4)]


@pytest.mark.parametrize(("name", "what", "source", "size"), ALSO,
                         ids=[f"{n}: {w} ({size} ranks)" for n, w, _, size in ALSO])
def test_another_right_answer_passes(request, capsys, name, what, source, size):
    """A right answer written unlike the worked solution (another algorithm the text allows,
    keyword arguments, the world named as the group) passes, at two world sizes."""
    cluster = request.getfixturevalue(f"cluster{size}")
    cluster.px(f"{RIGHT[name]}\n{source}")  # the worked answer's imports, then this answer
    checks.check(cluster, EXERCISES[name], seed=SEED)
    assert (f"{name}: right on all {size} ranks, and again on {size - 1} ranks alone"
            in capsys.readouterr().out), what


PLANTED = [(name, *planted[:3], planted[3] if len(planted) > 3 else 3)
           for wrongs in (WRONG, MORE_WRONG) for name, wrong in wrongs.items()
           for planted in wrong]


@pytest.mark.parametrize(("name", "what", "source", "piece", "size"), PLANTED,
                         ids=[f"{n}: {w} ({size} ranks)" for n, w, _, _, size in PLANTED])
def test_a_wrong_answer_is_caught_and_explained(request, name, what, source, piece, size):
    cluster = request.getfixturevalue(f"cluster{size}")
    # the worked answer's imports, as a learner's earlier cells would have made them, so that
    # this test does not lean on an earlier one's; then the wrong answer (one cell, one trip)
    cluster.px(f"{RIGHT[name]}\n{source}")
    with pytest.raises(AssertionError) as err:
        checks.check(cluster, dataclasses.replace(EXERCISES[name], timeout=QUICK), seed=SEED)
    assert piece in str(err.value), f"{what}: {err.value}"


def test_a_missing_function_is_named(cluster3):
    cluster3.px("globals().pop('count_ranks', None)")
    with pytest.raises(AssertionError, match="count_ranks is not defined on this rank"):
        checks.check(cluster3, checks.COUNT_RANKS, seed=SEED)


@pytest.mark.parametrize("name", sorted(IN_NOTEBOOK))
def test_a_notebook_side_exercise_passes_its_right_answer(name, capsys):
    getattr(checks, f"check_{name}")(define(IN_NOTEBOOK[name][0], name))
    assert f"{name}: right on" in capsys.readouterr().out


IN_NOTEBOOK_RIGHT = [(name, what, source) for name, right in IN_NOTEBOOK_ALSO_RIGHT.items()
                      for what, source in right]


@pytest.mark.parametrize(("name", "what", "source"), IN_NOTEBOOK_RIGHT,
                         ids=[f"{n}: {w}" for n, w, _ in IN_NOTEBOOK_RIGHT])
def test_a_notebook_side_exercise_passes_another_right_answer(name, what, source, capsys):
    getattr(checks, f"check_{name}")(define(source, name))
    assert f"{name}: right on" in capsys.readouterr().out, what


IN_NOTEBOOK_WRONG = [(name, *planted) for name, (_, wrong) in IN_NOTEBOOK.items()
                     for planted in wrong + IN_NOTEBOOK_MORE_WRONG.get(name, [])]


@pytest.mark.parametrize(("name", "what", "source", "piece"), IN_NOTEBOOK_WRONG,
                         ids=[f"{n}: {w}" for n, w, _, _ in IN_NOTEBOOK_WRONG])
def test_a_notebook_side_wrong_answer_is_caught(name, what, source, piece):
    with pytest.raises(AssertionError, match=f"{name} is not right yet") as err:
        getattr(checks, f"check_{name}")(define(source, name))
    assert piece in str(err.value), f"{what}: {err.value}"


def test_checks_leave_the_engines_open_files_and_threads_as_they_found_them(cluster3, capsys):
    """A check forms and destroys process groups on every rank; nothing of them may stay
    (open files, threads): a learner checks answers dozens of times in one session, and an
    ordinary user may open 1024 files (a Mac 256). The first check warms up what stays by
    design (imports, the calltrace hooks); the next five must add nothing, once the groups
    they formed are released (in a thread, trial.release)."""
    import psutil

    def counts() -> dict[int, tuple[int, int]]:
        cluster3.px("from helpers.exercises import trial\ntrial.settle()")  # groups released
        procs = {r.rank: psutil.Process(r.pid) for r in cluster3.ranks}
        return {rank: (p.num_fds(), p.num_threads()) for rank, p in procs.items()}

    cluster3.px(RIGHT["count_ranks"])
    checks.check(cluster3, checks.COUNT_RANKS, seed=SEED)
    before = counts()
    for i in range(5):
        checks.check(cluster3, checks.COUNT_RANKS, seed=SEED + 1 + i)
    after = counts()
    grew = {rank: (before[rank], after[rank]) for rank in before if after[rank] > before[rank]}
    assert not grew, f"(open files, threads) before and after 5 checks, by rank: {grew}"


def test_each_check_of_my_piece_and_zero_sgd_step_meets_every_kind_of_length():
    """Notebook 08's wrong paddings (none, n // size + 1, rounded down) are each right at one
    kind of length only, and the texts promise any length, shorter than the world size too:
    every check, with a learner's seeds (6b, 6b+1, 6b+2) or the tests' (s, s+2, s+4), must meet
    a length the size divides, one it does not, and one shorter than the size, at its own size
    and on one rank fewer (seed + 1)."""
    import random

    from helpers.exercises.sharding import _length

    draw = random.Random(8)
    for name in ("my_piece", "zero_sgd_step"):
        cases = EXERCISES[name].cases
        for _ in range(500):
            base = draw.randrange(2, 2**30)
            for seeds in ([base * 2 * cases + c for c in range(cases)],
                          [base + 2 * c for c in range(cases)]):
                for size in range(2, 9):
                    for run, n in ((seeds, size), ([s + 1 for s in seeds], size - 1)):
                        lengths = [_length(s, n) for s in run]
                        kinds = {"divides" if length % n == 0 else "shorter" if length < n
                                 else "remainder" for length in lengths}
                        assert n == 1 or kinds == {"divides", "remainder", "shorter"}, (
                            name, run, n, lengths)


# the pure test above shows every check meets both kinds of length at 2 to 8 ranks, whatever
# the seed; here, at one size, that real checks with a learner's seeds do fail these answers
PADDED = [(name, what, source, 3) for name, answers in PADDINGS.items()
          for what, source in answers]


@pytest.mark.parametrize(("name", "what", "source", "size"), PADDED,
                         ids=[f"{n}: {w} ({size} ranks, learners' seeds)"
                              for n, w, _, size in PADDED])
def test_a_wrong_padding_fails_whatever_the_seed(request, name, what, source, size):
    """With the random seeds a learner's check draws, not only the tests' SEED."""
    import random

    cluster = request.getfixturevalue(f"cluster{size}")
    cluster.px(f"{RIGHT[name]}\n{source}")
    random.seed(size)
    for _ in range(3):
        with pytest.raises(AssertionError, match=f"{name} is not right yet"):
            checks.check(cluster, EXERCISES[name])


def test_an_answer_that_makes_groups_leaves_the_next_checks_working(cluster3, capsys):
    """new_group names a group by a count every rank keeps; an answer that makes a group in
    the run on one rank fewer (which the last rank sits out) moves that count on some ranks
    only, and every later new_group would then wait forever. The check agrees the count again
    at its end, so the next check (and the notebook's own groups) still form."""
    from answers_shared import SUB_GROUP

    cluster3.px(RIGHT["count_ranks"].replace("    dist.all_reduce(one)\n", SUB_GROUP))
    with pytest.raises(AssertionError, match="on a group of its own"):
        checks.check(cluster3, dataclasses.replace(checks.COUNT_RANKS, timeout=QUICK),
                     seed=SEED)
    cluster3.px("from torch.distributed import distributed_c10d as c10d\n"
                "count = c10d._world.group_count")
    counts = cluster3.view.pull("count", block=True)
    assert len(set(counts)) == 1, f"the ranks' group counts differ: {counts}"
    cluster3.px(RIGHT["ring_sum"])
    checks.check(cluster3, checks.RING_SUM, seed=SEED)
    assert "ring_sum: right on all 3 ranks" in capsys.readouterr().out


def test_a_ring_all_gather_check_meets_two_chunk_lengths():
    """Notebook 02's exercise 2 promises any chunk: its check runs at n ranks with a seed and
    at n - 1 with the seed + 1, and the two runs must not share a chunk length, so that an
    answer sized for one length (the lesson's 2) fails one of them, whatever the seed."""
    from helpers.exercises.collectives import chunk_length

    for seed in range(2000):
        for size in range(2, 17):
            assert chunk_length(size, seed) != chunk_length(size - 1, seed + 1), (seed, size)
