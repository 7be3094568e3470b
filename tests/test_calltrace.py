"""The call recorder (helpers.calls.trace) in this process, on a process group of one rank."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from helpers import calltable, calltrace


@pytest.fixture
def group_of_one():
    """A gloo group of one rank in this process, with the recorder installed, then removed."""
    originals = {n: getattr(dist, n) for n in calltrace.COLLECTIVES + calltrace.POINT_TO_POINT
                 if hasattr(dist, n)}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    calltrace.install()
    yield originals
    calltrace.uninstall()
    dist.destroy_process_group()
    assert all(getattr(dist, n) is f for n, f in originals.items()), "originals not restored"
    assert c10d.isend is originals["isend"] and c10d.irecv is originals["irecv"]


def test_wrappers_keep_name_signature_and_return_values(group_of_one):
    for name, original in group_of_one.items():
        wrapped = getattr(dist, name)
        assert wrapped is not original, f"{name} is not wrapped"
        assert wrapped.__name__ == original.__name__ and wrapped.__doc__ == original.__doc__
        assert inspect.signature(wrapped) == inspect.signature(original), name
    t = torch.arange(4.0)
    assert dist.all_reduce(t) is None and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    work = dist.all_reduce(t, async_op=True)
    assert isinstance(work, dist.Work) and work.wait() is True
    assert dist.barrier(async_op=True).wait() is True
    objects = [None]
    assert dist.all_gather_object(objects, {"a": 1}) is None and objects == [{"a": 1}]
    # P2POp checks its op by identity: the wrapped isend/irecv must pass and keep their role
    op = dist.P2POp(dist.isend, t, 0)
    assert op.op is c10d.isend and "isend" in repr(op)


def test_each_call_is_recorded_once_with_what_it_was(group_of_one):
    t = torch.ones(4, dtype=torch.float64)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.all_gather_object([None], "x")  # calls all_gather inside: recorded once
    dist.all_gather([torch.zeros(4, dtype=torch.float64)], t)
    dist.barrier()
    entries = calltrace.records()
    assert [e["op"] for e in entries] == [
        "all_reduce", "broadcast", "all_gather_object", "all_gather", "barrier"]
    assert [e["seq"] for e in entries] == [0, 1, 2, 3, 4]
    assert {e["group"] for e in entries} == {"world"} and entries[0]["group_ranks"] == (0,)
    assert entries[0]["shapes"] == ((4,),) and entries[0]["dtype"] == "float64"
    assert entries[1]["peer"] == 0 and entries[2]["shapes"] == ()
    assert entries[3]["shapes"] == ([(4,)], (4,))
    assert all(e["state"] == "done" and e["seconds"] >= 0 for e in entries)
    assert calltable.describe(entries[0]) == "all_reduce f64[4]"
    assert calltable.describe(entries[1]) == "broadcast(0) f64[4]"
    assert calltable.describe(entries[3]) == "all_gather f64(1×[4], [4])"


def test_a_failing_call_is_recorded_as_failed_and_still_raises(group_of_one):
    with pytest.raises(RuntimeError, match="invalid root rank"):
        dist.broadcast(torch.ones(2), src=5)
    with pytest.raises(ValueError, match="destination rank"):
        dist.send(torch.ones(2), dst=0)
    failed = calltrace.records()
    assert [(e["op"], e["state"]) for e in failed] == [("broadcast", "failed"), ("send", "failed")]
    assert failed[0]["error"].startswith("RuntimeError: ProcessGroupGloo::broadcast")
    assert failed[1]["kind"] == "p2p" and failed[1]["peer"] == 0 and failed[1]["seq"] == 1
    assert calltable.describe(failed[1]) == "send→0 f32[2] ✗"
    # a call that does not even bind is left to the original, which raises its usual error
    with pytest.raises(TypeError):
        dist.all_reduce()
    assert len(calltrace.records()) == 2


@pytest.mark.parametrize("call", [
    lambda t, g: dist.send(t, dst=1),
    lambda t, g: dist.isend(t, dst=1),
    lambda t, g: dist.irecv(t, src=-1),
    lambda t, g: dist.recv(t, group_src=1, group=g),
    lambda t, g: dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1)]),
], ids=["send", "isend", "irecv", "recv on a group", "batch"])
def test_a_peer_outside_the_group_is_refused_before_gloo_sees_it(group_of_one, call):
    """gloo does not check a point-to-point peer: dst=world_size hangs or crashes the process
    (a segfault, seen under the exercise checkers). The record refuses it first."""
    with pytest.raises(ValueError, match=r"rank 0: \w+ (to|from|with) rank -?1, which is not a "
                       r"rank of the group \(its ranks are 0..0\): check how the peer is computed"):
        call(torch.ones(2), dist.new_group([0]))
    assert calltrace.records()[-1]["state"] == "failed"
    t = torch.ones(2)  # the process still communicates
    dist.all_reduce(t)
    assert t.tolist() == [1.0, 1.0]


def test_async_calls_and_subgroups_have_their_own_counters(group_of_one):
    dist.all_reduce(torch.ones(1), async_op=True).wait()
    sub = dist.new_group([0])
    dist.all_reduce(torch.ones(1), group=sub)
    dist.all_reduce(torch.ones(1))
    entries = calltrace.records()
    assert [(e["group"] == "world", e["seq"], e["state"]) for e in entries] == [
        (True, 0, "issued"), (False, 0, "done"), (True, 1, "done")]
    assert entries[0]["async"] and not entries[2]["async"]


def test_the_record_is_bounded_and_reset_on_install(group_of_one):
    calltrace.install(maxlen=5)  # a second install wraps nothing twice
    assert getattr(dist.all_reduce, "__wrapped__", None) is group_of_one["all_reduce"]
    for _ in range(8):
        dist.all_reduce(torch.ones(1))
    entries = calltrace.records()
    assert [e["seq"] for e in entries] == [3, 4, 5, 6, 7] and entries[0]["n"] == 3
    # a truncated record is compared from its first entry on: nothing is "missing"
    assert calltable.table({0: entries}).endswith("no mismatch")
    calltrace.reset()
    assert calltrace.records() == []


def test_overhead_is_measured_without_touching_the_record(group_of_one):
    dist.all_reduce(torch.ones(1))
    before = calltrace.records()
    extra = calltrace.overhead_us(calls=200)
    assert 0 < extra < 1000, extra  # microseconds per call; a sanity bound, not a speed target
    assert calltrace.records() == before
    dist.all_reduce(torch.ones(1))
    assert [e["seq"] for e in calltrace.records()] == [0, 1]


def test_a_failure_of_the_record_itself_never_breaks_the_call(group_of_one, monkeypatch):
    def broken(*args):
        raise KeyError("the record is broken")

    monkeypatch.setattr(calltrace, "_tensors", broken)
    t = torch.ones(2)
    assert dist.all_reduce(t) is None and t.tolist() == [1.0, 1.0]
    assert calltrace.records() == []
    monkeypatch.undo()
    dist.all_reduce(t)
    assert [e["seq"] for e in calltrace.records()] == [0], "a failed record must not use a number"
