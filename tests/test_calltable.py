"""Lining up the records of several ranks (helpers.calls.table), on made-up records."""

from __future__ import annotations

from fakes import entry, same_on

from helpers import calltable


def test_matching_ranks_give_aligned_rows_and_no_mismatch():
    traces = same_on(range(3), "all_reduce", "broadcast")
    rows = calltable.rows(traces)
    assert [(r.label, r.problem) for r in rows] == [("0", None), ("1", None)]
    text = calltable.table(traces)
    assert text.splitlines()[1].split() == ["world", "0"] + ["all_reduce", "f32[4]"] * 3
    assert text.endswith("no mismatch")


def test_a_rank_that_skips_a_collective_is_named():
    traces = same_on(range(3), "all_reduce", "all_reduce", "all_reduce")
    traces[1].pop()
    traces[0][2]["state"] = traces[2][2]["state"] = "failed"
    rows = calltable.rows(traces)
    assert rows[-1].problem == "rank(s) [1] never made this call"
    text = calltable.table(traces)
    assert "≠" in text.splitlines()[3] and "all_reduce f32[4] ✗" in text
    assert text.endswith("world 2: rank(s) [1] never made this call")


def test_different_shapes_operations_and_roots_are_flagged():
    traces = same_on(range(3), "all_reduce")
    traces[1][0]["shapes"] = ((4000,),)
    assert calltable.rows(traces)[0].problem == (
        "different shapes: rank 0 [4], rank 1 [4000], rank 2 [4]")
    traces[1][0]["op"] = "broadcast"
    assert calltable.rows(traces)[0].problem.startswith("different operations: rank 0 all_reduce")
    traces = {r: [entry("broadcast", 0, peer=r % 2)] for r in range(3)}
    assert calltable.rows(traces)[0].problem.startswith("different roots")
    # gather: only the destination passes a list, so its shapes differ by design
    traces = {r: [entry("gather", 0, peer=0, shapes=((4,), [(4,)] * 3) if r == 0 else ((4,),))]
              for r in range(3)}
    assert calltable.rows(traces)[0].problem is None


def test_everyone_receiving_first_is_an_unpaired_receive():
    n = 3
    traces = {r: [entry("recv", 0, kind="p2p", peer=(r - 1) % n, shapes=((1,),),
                        state="failed")] for r in range(n)}
    rows = calltable.rows(traces)
    assert [r.label for r in rows] == ["p2p"]
    assert rows[0].problem == "rank 0 receives from rank 2, which makes no matching send"
    assert calltable.describe(traces[0][0]) == "recv←2 f32[1] ✗"


def test_a_ring_of_isend_irecv_or_batches_is_paired():
    n = 3
    traces = {r: [entry("isend", 0, kind="p2p", peer=(r + 1) % n, shapes=((1,),), n=0),
                  entry("irecv", 0, kind="p2p", peer=(r - 1) % n, shapes=((1,),), n=1),
                  entry("all_reduce", 0, n=2)] for r in range(n)}
    rows = calltable.rows(traces)
    assert [(r.label, r.problem) for r in rows] == [("p2p", None), ("p2p", None), ("0", None)]
    batch = {r: [entry("batch_isend_irecv", 0, kind="p2p", shapes=((1,), (1,)),
                       parts=(("isend", (r + 1) % n, (1,)), ("irecv", (r - 1) % n, (1,))))]
             for r in range(n)}
    assert calltable.rows(batch)[0].problem is None
    assert calltable.describe(batch[0][0]) == "batch[→1 ←2] f32([1], [1])"
    batch[2][0]["parts"] = (("isend", 0, (2,)), ("irecv", 1, (1,)))  # wrong size to rank 0
    assert calltable.rows(batch)[0].problem == (
        "rank 0 receives from rank 2, which makes no matching send")


def test_ranks_without_a_record_are_shown_not_blamed():
    traces = same_on([1, 2], "all_reduce")
    traces[0] = "process gone"
    text = calltable.table(traces)
    assert "rank 0 (process gone)" in text.splitlines()[0] and text.endswith("no mismatch")


def test_subgroups_get_their_own_rows_and_only_their_members_count():
    traces = same_on(range(3), "all_reduce")
    for r in (0, 1):
        traces[r].append(entry("all_reduce", 0, group="group 1", ranks=(0, 1), n=1))
    rows = calltable.rows(traces)
    assert [(r.group, r.label, r.problem) for r in rows] == [
        ("world", "0", None), ("group 1", "0", None)]
    assert calltable.describe(rows[1].cells.get(2)) == "—"
