"""How a learner's function is run for a check (helpers.exercises.trial): a right answer written
another way passes without harming the cluster, and side effects on the global random
generators or the environment are named, whatever the exercise."""

from __future__ import annotations

import re

import pytest

from helpers import checks

COUNT_RANKS = checks.COUNT_RANKS

EXPLICIT_WORLD = '''
def count_ranks():
    one = torch.ones(1, device=device)
    dist.all_reduce(one, group=dist.group.WORLD)
    return int(one.item())
'''


def test_an_explicit_world_group_is_the_checks_group_and_the_cluster_stays_healthy(cluster3,
                                                                                  capsys):
    cluster3.px(EXPLICIT_WORLD)
    checks.check(cluster3, COUNT_RANKS, seed=5)
    # a smaller run that waited for the rank left out of it would end in a timeout, not pass
    assert "right on all 3 ranks, and again on 2 ranks alone" in capsys.readouterr().out
    cluster3.px("t = torch.ones(1); dist.all_reduce(t); assert t.item() == world_size")


@pytest.mark.parametrize(("change", "named"), [
    ("torch.manual_seed(0)", "torch's random generator"),
    ("import random; random.random()", "Python's random generator"),
    ("import numpy; numpy.random.seed(1)", "numpy's random generator"),
    ("import os; os.environ['COURSE_TRIAL_LEFTOVER'] = '1'", "the environment (os.environ)"),
])
def test_a_right_value_with_a_side_effect_is_named(cluster3, change, named):
    cluster3.px(f'''
def count_ranks():
    {change}
    one = torch.ones(1, device=device)
    dist.all_reduce(one)
    return int(one.item())
''')
    state = ("import os, random, numpy; NAME = (torch.get_rng_state().tolist(), "
             "random.getstate(), numpy.random.get_state()[1].tolist(), dict(os.environ))")
    cluster3.px(state.replace("NAME", "_before"))
    try:
        with pytest.raises(AssertionError, match=re.escape(f"count_ranks changed {named}")):
            checks.check(cluster3, COUNT_RANKS, seed=5)
        cluster3.px(state.replace("NAME", "_after"))  # the check put back what the answer did
        cluster3.px("assert _after == _before, f'rank {rank}: the check left a side effect'")
    finally:
        cluster3.px("import os; os.environ.pop('COURSE_TRIAL_LEFTOVER', None)")


def test_code_that_takes_the_default_group_runs_on_the_trials_group(cluster3, capsys):
    """DistributedDataParallel, among others, takes the default group when none is named. In
    the run on one rank fewer it must not wait there for the rank that sits it out: the wrong
    answer is named at once, and the learner's cluster works afterwards."""
    from answers import RIGHT

    cluster3.px(RIGHT["load_wrong_way"].replace(
        "    return model", "    return torch.nn.parallel.DistributedDataParallel(model)"))
    with pytest.raises(AssertionError, match="load_wrong_way gave a DDP model") as err:
        checks.check(cluster3, checks.LOAD_WRONG_WAY, seed=7)
    assert "did not finish" not in str(err.value)
    cluster3.px("t = torch.ones(1); dist.all_reduce(t); assert t.item() == world_size, t")
    cluster3.px(RIGHT["load_wrong_way"])
    checks.check(cluster3, checks.LOAD_WRONG_WAY, seed=8)
    assert "load_wrong_way: right on all 3 ranks" in capsys.readouterr().out
