"""The checkers of notebook 03's exercises, without a cluster: what exercise 3 plants (a real
last-bit change, on any rank), how it counts the numbers a rank passes to its collectives, and
exercise 2's rule that the weights stay as they were (tests/test_exercises.py runs them on
ranks)."""

from __future__ import annotations

import functools

import pytest
import torch

from helpers.exercises import gradient_average as ga


def call(op: str, shapes: tuple) -> dict:
    return {"op": op, "kind": "collective", "peer": None, "parts": (), "shapes": shapes}


@functools.cache  # the untouched case of a seed is asked for again and again
def _planted(seed: int, size: int) -> dict[int, list[torch.Tensor]]:
    """Every rank's parameters for one seed of exercise 3, as the checker makes them."""
    models = {r: ga._sync_args(r, size, "cpu", None, seed)[0] for r in range(size)}
    return {r: [p.detach().clone() for p in model.parameters()] for r, model in models.items()}


@pytest.mark.parametrize("seed", [8 * x + 1 for x in range(5)])
def test_the_last_bit_case_moves_one_value_by_one_ulp(seed):
    ranks = _planted(seed, 4)
    untouched = [p.detach() for p in
                 ga.mlp(hidden=8, depth=ga.SYNC_DEPTH, seed=seed % 1000).parameters()]
    changed = [(r, a, b) for r, params in ranks.items() for a, b in zip(params, untouched)
               if not torch.equal(a, b)]
    assert len(changed) == 1, f"seed {seed}: {len(changed)} tensors changed, expected 1"
    _, a, b = changed[0]
    differ = (a != b).nonzero()
    assert len(differ) == 1, f"seed {seed}: {len(differ)} values changed, expected 1"
    i = tuple(differ[0])
    assert a[i] == torch.nextafter(b[i], torch.tensor(float("inf"))), f"seed {seed}: not one ulp up"


@pytest.mark.parametrize("size", [2, 3, 4])
def test_any_rank_can_be_the_one_that_differs(size):
    # check() draws seeds of the form x * 8 + c (cases=4); the smaller run uses seed + 1
    differing = set()
    for seed in [8 * x + c + extra for x in range(40) for c in (1, 2, 3) for extra in (0, 1)]:
        if seed % 4 == 0:
            continue
        ranks = _planted(seed, size)
        untouched = _planted(seed - seed % 4, size)[0]  # case 0: nobody differs
        differing |= {r for r, params in ranks.items()
                      if any(not torch.equal(a, b) for a, b in zip(params, untouched))}
    assert differing == set(range(size)), f"at {size} ranks only ranks {sorted(differing)} differ"


@pytest.mark.parametrize("size", [3, 4, 8])
def test_an_all_gather_counts_what_a_rank_passes_in_at_any_world_size(size):
    gather = [call("all_gather", ([(8,)] * size, (8,)))]
    assert ga._sync_means(gather, 0, size, None) is None
    too_many = [call("all_gather", ([(65,)] * size, (65,)))]
    assert "carried 65 numbers" in ga._sync_means(too_many, 0, size, None)


def test_reductions_and_broadcasts_count_their_tensor():
    assert ga._sync_means([call("all_reduce", ((32,),)), call("all_reduce", ((32,),))],
                          0, 4, None) is None
    assert "carried 65 numbers" in ga._sync_means(
        [call("all_reduce", ((32,),)), call("broadcast", ((33,),))], 0, 4, None)


@pytest.mark.parametrize("op", ga.OBJECT_COLLECTIVES)
def test_object_collectives_are_refused_whatever_they_carry(op):
    problem = ga._sync_means([call(op, ())], 0, 4, None)
    assert problem is not None and "tensor collectives only" in problem


def test_exercise_2_notices_changed_weights_and_leaves_right_answers_alone():
    model, n = ga._weighted_args(0, 3, "cpu", None, seed=5)
    assert ga._weights_changed((model, n), None) is None
    for p in model.parameters():
        p.grad *= 2  # gradients may change
    assert ga._weights_changed((model, n), None) is None
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1e-3
    assert "changed the parameter 0.weight" in ga._weights_changed((model, n), None)
    assert "changed the parameter" in ga._weighted_means(
        [call("all_reduce", ((1,),))], 0, 3, "changed the parameter 0.weight: ...")
