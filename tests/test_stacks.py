"""Where each rank is: stacks taken from outside the engines (helpers.cluster.stacks and
Cluster.stacks)."""

from __future__ import annotations

import re
import time

import pytest

from helpers import RankError
from helpers.cluster import stacks

STUCK = """
import time
def known_function_name():
    while True:
        time.sleep(0.05)
if rank == 1:
    known_function_name()
"""

PY_SPY_DUMP = """Process 42: python -m helpers.cluster.forkserver
Python v3.11.7

Thread 42 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    _wrap.<locals>.recorded (helpers/calls/trace.py:132)
    train_step (3436970586.py:3)
    <module> (3436970586.py:5)
    InteractiveShell.run_code (IPython/core/interactiveshell.py:3823)
Thread 43 (idle): "IOPub"
    EpollSelector.select (selectors.py:468)
"""

FAULTHANDLER_DUMP = """main thread 0x00007fb85d02eb80
Thread 0x00007fb8394276c0 (most recent call first):
  File "/x/zmq/devices/basedevice.py", line 248 in run

Current thread 0x00007fb85d02eb80 (most recent call first):
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/tmp/ipykernel_1/123456.py", line 3 in train_step
  File "/tmp/ipykernel_1/123456.py", line 5 in <module>
  File "/x/site-packages/IPython/core/interactiveshell.py", line 3823 in run_code
"""


@pytest.mark.parametrize("dump", [PY_SPY_DUMP, FAULTHANDLER_DUMP], ids=["py-spy", "faulthandler"])
def test_a_stack_reads_as_one_line_from_the_call_out_to_the_cell(dump):
    assert stacks.summary(dump) == ("in all_reduce, called from train_step (line 3), "
                                    "called from the cell (line 5)")


def test_a_coloured_dump_reads_the_same():
    coloured = PY_SPY_DUMP.replace("all_reduce (", "\x1b[32mall_reduce\x1b[0m (")
    assert stacks.summary(coloured) == stacks.summary(PY_SPY_DUMP)


def test_an_idle_engine_and_an_unknown_stack():
    idle = 'Thread 1 (idle): "MainThread"\n    select (selectors.py:468)\n' \
           '    BaseEventLoop._run_once (asyncio/base_events.py:1922)\n'
    assert stacks.summary(idle) == "waiting for work (no cell is running)"
    assert stacks.summary("") == "stack unknown"


@pytest.mark.parametrize("tool", ["py-spy", "faulthandler"])
def test_a_stuck_rank_is_found_in_its_function(cluster3, monkeypatch, tool):
    if tool == "faulthandler":  # as where py-spy is missing or may not attach
        monkeypatch.setattr(stacks, "py_spy", lambda: None)
    elif stacks.py_spy() is None:
        pytest.fail("py-spy is a dependency of the course and should be installed")
    stuck = cluster3.client[cluster3.ranks[1].engine_id].execute(STUCK.replace(
        "if rank == 1:\n    ", ""), block=False)
    try:
        time.sleep(0.5)
        where = cluster3.where()
        assert re.fullmatch(r"in known_function_name \(line [45]\), called from the cell "
                            r"\(line \d\)", where[1]), where
        assert where[0] == where[2] == "waiting for work (no cell is running)", where
        if tool == "faulthandler":
            assert "faulthandler instead" in cluster3.stacks([1])[1]
    finally:
        cluster3.interrupt([1])
        with pytest.raises(Exception, match="KeyboardInterrupt"):
            stuck.get(10)


def test_the_report_of_a_cell_past_its_wait_says_where_each_silent_rank_is(cluster3):
    try:
        with pytest.raises(RankError) as err:
            cluster3.px(STUCK, timeout=1)
        assert err.value.silent == [1]
        assert re.search(r"rank 1: still running, in known_function_name \(line [45]\), "
                         r"called from the cell", str(err.value)), err.value
    finally:
        cluster3.interrupt([1])
        time.sleep(0.3)
    cluster3.px("x = 1")  # the cluster answers again
