"""The pure parts of the exercise checkers (helpers.checks): how a value, a rank's calls and
a whole check are judged, on made-up results (tests/test_exercises.py runs them on ranks)."""

from __future__ import annotations

import pytest
import torch

from helpers import checks
from helpers.checks import value_problem
from helpers.exercises import collectives, debugging_hangs, gradient_average, means


@pytest.mark.parametrize(("got", "expected", "piece"), [
    (3.0, 3, "3.0 (a float), expected 3 (an int)"),
    (True, 1, "True (a bool), expected 1 (an int)"),
    (3, 3.0, "3 (an int), expected 3.0 (a float)"),
    (torch.tensor([3.0]), 3.0, "a float32 tensor [3.0], expected 3.0"),
    (torch.zeros(2), torch.zeros(3), "of shape [2], expected float32 of shape [3]"),
    (torch.zeros(2, dtype=torch.int64), torch.zeros(2), "an int64 tensor of shape [2]"),
    (torch.zeros(20), torch.ones(20), "values off by up to 1 (tolerance"),
    ([1, 2], (1, 2), "a list"),
    ([1, 2, 4], [1, 2, 3], "item 2: 4 (an int), expected 3 (an int)"),
    ({"a": 1}, {"a": 1, "b": 2}, "expected a dict with keys ['a', 'b']"),
    (0.0, None, "0.0 (a float), expected None"),
])
def test_a_wrong_value_type_or_shape_is_named(got, expected, piece):
    problem = value_problem(got, expected)
    assert problem is not None and piece in problem, problem


@pytest.mark.parametrize(("got", "expected"), [
    (3, 3), (2.0000001, 2.0), (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7])),
    (torch.tensor([1, 2]), torch.tensor([1, 2])), (None, None), (True, True),
    ({"w": torch.ones(2)}, {"w": torch.ones(2)}), ([1, [2.0]], [1, [2.0]]),
])
def test_a_right_value_passes(got, expected):
    assert value_problem(got, expected) is None


def call(op, kind, peer=None, parts=(), shapes=((4,),)):
    return {"op": op, "kind": kind, "peer": peer, "parts": parts, "shapes": shapes}


def test_rules_about_the_means():
    p2p = [call("send", "p2p", 1), call("recv", "p2p", 1)]
    assert means.point_to_point_only(p2p, 0, 2, None) is None
    assert "point-to-point calls only" in means.point_to_point_only(
        [call("all_reduce", "collective")], 0, 2, None)
    assert "made no point-to-point" in means.point_to_point_only([], 0, 2, None)
    assert "blocking dist.send" in means.blocking_only(
        [call("isend", "p2p", 1), call("irecv", "p2p", 1)], 0, 2, None)
    assert means.one_collective([call("all_reduce", "collective")], 0, 2, None) is None
    assert "2 collective calls" in means.one_collective(
        [call("all_reduce", "collective"), call("barrier", "collective")], 0, 2, None)
    assert "one all_reduce" in means.one_all_reduce(
        [call("all_gather", "collective")], 0, 2, None)
    assert "no communication" in means.no_communication(p2p, 0, 2, None)
    assert means.collectives_only([call("all_reduce", "collective")], 0, 2, None) is None


def test_the_size_rule_of_in_sync_counts_every_number_carried():
    small = [call("all_reduce", "collective", shapes=((1,),))] * 2
    assert gradient_average._sync_means(small, 0, 4, None) is None
    big = [call("broadcast", "collective", shapes=((4000,),))]
    assert "carried 4000 numbers" in gradient_average._sync_means(big, 0, 4, None)


def test_the_tree_rule_counts_sends_and_receives():
    tree_rank0 = [call("send", "p2p", 1), call("send", "p2p", 2)]
    assert collectives._tree_means(tree_rank0, 0, 4, None) is None
    linear_rank0 = [call("send", "p2p", r) for r in (1, 2, 3)]
    assert "at most 2 rounds" in collectives._tree_means(linear_rank0, 0, 4, None)
    assert "receives once, from rank 0" in collectives._tree_means([], 2, 4, None)


def run(rank, size, value, error=None, calls=()):
    return {"rank": rank, "size": size, "value": value, "error": error, "calls": list(calls),
            "observed": None}


def test_a_verdict_names_the_world_size_and_the_rank():
    results = [{"full": run(r, 3, 3), "smaller": run(r, 2, 3)} for r in range(2)]
    results.append({"full": run(2, 3, 3)})
    one = [call("all_reduce", "collective")]
    for res in results:
        res["full"]["calls"] = one
        if "smaller" in res:
            res["smaller"]["calls"] = one
    problems = checks.verdict(checks.COUNT_RANKS, results, seed=1)
    assert problems == ["at world size 2, rank 0: count_ranks gave 3 (an int), expected 2 (an int)",
                        "at world size 2, rank 1: count_ranks gave 3 (an int), expected 2 (an int)"]


def test_problems_at_the_cluster_size_come_first_and_alone():
    results = [{"full": run(r, 2, None, error="NameError: x"), "smaller": run(r, 1, 5)}
               for r in range(2)]
    problems = checks.verdict(checks.COUNT_RANKS, results, seed=1)
    assert problems == [f"at world size 2, rank {r}: count_ranks raised NameError: x"
                        for r in range(2)]


def test_a_missing_function_is_reported_per_rank():
    results = [{"missing": "count_ranks is not defined on this rank"}, {"full": run(1, 2, 2)}]
    assert checks.verdict(checks.COUNT_RANKS, results, 1) == [
        "rank 0: count_ranks is not defined on this rank"]


def test_planted_traces_blame_the_ranks_that_differ_from_a_majority():
    for seed in range(40):
        size = 2 + seed % 7
        for kind in debugging_hangs.KINDS:
            traces, answer = debugging_hangs.planted_traces(seed, size, kind)
            assert sorted(traces) == list(range(size))
            for t in traces.values():  # numbered in order, from wherever the record starts
                assert all(e["seq"] == t[0]["seq"] + i for i, e in enumerate(t))
                assert all(isinstance(e["shapes"], tuple) for e in t)  # hashable, as recorded
            calls = {r: [(e["seq"], e["op"], e["shapes"]) for e in t] for r, t in traces.items()}
            if answer is None:
                assert kind == "agree" and len({str(c) for c in calls.values()}) == 1
                continue
            seq, culprits = answer
            if kind == "one truncated, one other op" and size > 2:
                (gone,) = culprits  # never made the call; another rank made another one there
                assert seq not in {s for s, _, _ in calls[gone]}, (kind, size)
                there = [next(c for c in calls[r] if c[0] == seq) for r in range(size) if r != gone]
                assert len(set(there)) == 2, (kind, size)
                continue
            others = [calls[r] for r in range(size) if r not in culprits]
            assert 1 <= len(culprits) <= 2 and others, (kind, size)
            assert all(c == others[0] for c in others), (kind, size)  # the others agree
            missing = [r for r in culprits if seq not in {s for s, _, _ in calls[r]}]
            if missing:  # the culprits never made the call: no majority needed
                assert missing == culprits, (kind, size)
            else:  # a changed call: the others are the majority (so never at 2 ranks)
                assert len(others) > len(culprits) and size > 2, (kind, size)
                assert all(calls[r] != others[0] for r in culprits), (kind, size)


def test_an_in_notebook_checker_names_the_first_cases_wrong_and_the_error_once():
    def wrong(traces):
        if len(traces) == 2:
            raise KeyError("seq")
        return None

    with pytest.raises(AssertionError) as caught:
        checks.check_first_mismatch(wrong, trials=7)
    lines = str(caught.value).splitlines()
    assert lines[0] == "first_mismatch is not right yet:"
    assert lines[1] == "  2 ranks, records #0: raised KeyError: 'seq'"
    assert lines[2].startswith("  3 ranks, records #1: returned None (a NoneType), expected ("), \
        lines
    assert lines[-1] == "  ... and 2 more", lines  # 7 wrong of 7: records #1 to #6 have a fault


def test_the_first_mismatch_checker_draws_fresh_records_unless_given_a_seed():
    seen = []
    for seed in (None, None, 5, 5):
        try:
            checks.check_first_mismatch(lambda traces: None, trials=7, seed=seed)
        except AssertionError as e:
            seen.append(str(e))
    assert seen[0] != seen[1] and seen[2] == seen[3]
