"""Failure reports name ranks and say what to do (pure parts of helpers.cluster.px); live output
labelled by rank, none of it lost, on a real cluster."""

import os
import subprocess
import sys
from contextlib import contextmanager

from helpers.cluster.magics import labelled_by_rank, streamed_by_rank
from helpers.cluster.px import describe_failure
from helpers.cluster.replies import is_dead


def test_dead_rank_report_names_it_and_the_survivors_errors():
    text = describe_failure({0: "RuntimeError: Connection closed by peer"}, [2], [1], 30)
    assert text.startswith("rank(s) [2] died")
    assert "rank 0: RuntimeError: Connection closed by peer" in text
    assert "rank 1: still running (waiting for the dead rank" in text
    assert "rank 2: process gone" in text and "cluster.restart()" in text


def test_once_a_rank_died_the_wait_ends_as_soon_as_every_other_rank_has_answered():
    """The survivors of a dead rank get `grace` s to report their own errors, and once they all
    have, nothing is left to wait for: with a grace and a timeout of 600 s, the wait ends at
    the poll that sees it (a fake client, whose rank 2 is on a host that no longer has it)."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    import pytest

    from helpers.cluster.px import RankError, wait_for_ranks

    futures = [Future() for _ in range(3)]
    for future in futures[:2]:
        future.set_result(RuntimeError("Connection closed by peer"))
    client = SimpleNamespace(ids=[0, 1], outstanding={"m2"})  # rank 2's engine is gone
    polls = []

    def wait(poll):
        polls.append(poll)
        assert len(polls) < 50, "still waiting, though every rank alive has answered"
        return False

    result = SimpleNamespace(_client=client, msg_ids=["m0", "m1", "m2"], _targets=[0, 1, 2],
                             _children=futures, wait=wait)
    rank_of = {e: SimpleNamespace(rank=e, engine_id=e, remote=True, pid=None) for e in range(3)}
    with pytest.raises(RankError, match=r"rank\(s\) \[2\] died") as err:
        wait_for_ranks(result, rank_of, timeout=600, grace=600)
    assert err.value.dead == [2] and err.value.silent == []
    assert err.value.failed == {r: "RuntimeError: Connection closed by peer" for r in (0, 1)}


def test_hang_report_names_the_silent_ranks_and_how_to_interrupt_them():
    text = describe_failure({}, [], [1, 3], 5)
    assert text.startswith("rank(s) [1, 3] did not answer within 5 s")
    assert "cluster.interrupt([3])" in text and "rank 0" not in text


def test_is_dead_sees_exited_and_zombie_processes():
    assert not is_dead(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while child.poll() is None:
        pass
    assert is_dead(child.pid)  # reaped: gone
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    assert is_dead(zombie.pid)
    zombie.wait()


class _Rank:
    def __init__(self, rank: int):
        self.rank = rank


class _Result:
    """The parts of an ipyparallel AsyncResult that the labels come from."""

    def __init__(self, engine_ids: list[int]):
        self._targets = list(engine_ids)
        self._metadata = [{"engine_id": e} for e in engine_ids]
        self._children = []
        self.seen_when_streaming = None

    def _iopub_streaming_output_callback(self, eid, msg_future, msg):
        pass

    @contextmanager
    def stream_output(self):
        self.seen_when_streaming = list(self._targets)  # ipyparallel fixes its labels here
        yield


def test_outputs_are_labelled_by_rank_after_a_restart_changed_the_engine_ids():
    rank_of = {4: _Rank(0), 5: _Rank(1), 7: _Rank(2)}  # engines 4, 5 and 7 are ranks 0, 1, 2
    result = _Result([4, 5, 7])
    with labelled_by_rank(result, rank_of):
        assert [md["engine_id"] for md in result._metadata] == [0, 1, 2]
    assert [md["engine_id"] for md in result._metadata] == [4, 5, 7]  # restored
    with streamed_by_rank(result, rank_of):
        assert result._targets == [4, 5, 7]  # the bounded wait still sees engine ids
    assert result.seen_when_streaming == [0, 1, 2]


def test_live_output_that_came_before_streaming_keeps_one_display_per_rank(cluster3, monkeypatch):
    """Output that reached the notebook before streaming began: ipyparallel would show it
    under one display id shared by every rank ("-stdout"), each rank's text replacing the last
    one's, so that only one rank's output stays visible. Each rank keeps its own here."""
    from ipyparallel.client import asyncresult

    shown: dict[str, str] = {}  # display id -> what the page shows there now
    monkeypatch.setattr(asyncresult, "get_ipython", lambda: type("Shell", (), {"kernel": 1}))
    monkeypatch.setattr("helpers.cluster.magics._ipython", lambda: type("Shell", (), {"kernel": 1}))
    monkeypatch.setattr(asyncresult, "publish_display_data",
                        lambda data, transient, update: shown.__setitem__(
                            transient["display_id"], data["text/plain"]))
    rank_of = {r.engine_id: r for r in cluster3.ranks}
    result = cluster3.view.execute("print('hello from', rank)", block=False)
    result.get(30)
    assert result.wait_for_output(10), "the ranks' output did not arrive"
    with streamed_by_rank(result, rank_of):
        pass
    texts = sorted(shown.values())
    assert texts == [f"[stdout:{r}] hello from {r}\n" for r in range(3)], texts
    assert "-stdout" not in shown, "a display shared by every rank"


def test_a_report_of_dropped_ranks_says_why_once():
    from helpers.cluster.replies import DROPPED, WHY_DROPPED

    text = describe_failure({1: DROPPED, 2: DROPPED}, [], [], None)
    assert text.startswith("rank(s) [1, 2] did not run the code:"), text
    assert f"rank 1: {DROPPED}" in text and text.count(WHY_DROPPED) == 1, text
    mixed = describe_failure({0: "ValueError: bad", 2: DROPPED}, [], [], None)
    assert mixed.startswith("the code failed on rank(s) [0, 2]:") and WHY_DROPPED in mixed, mixed


def _magic(cluster):
    """An IPython shell with the course's %%px for this cluster."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    from helpers.cluster.magics import CourseMagics

    start_ipython()  # once per process; later calls return None
    shell = get_ipython()
    shell.magics_manager.register(CourseMagics(shell, cluster.view, cluster))
    return shell


def test_a_cell_that_a_rank_dropped_is_an_error_naming_it_never_a_success(cluster3):
    """A %%px cell that reached rank 2 while it was still in an interrupted cell: the engine
    drops it (as a Jupyter kernel drops cells queued behind an error) and ipyparallel reports
    that as a success. The course names the rank."""
    import signal
    import threading
    import time

    import pytest

    from helpers.cluster.px import RankError
    from helpers.cluster.replies import DROPPED

    shell = _magic(cluster3)
    cluster3.view.execute("import time\ntime.sleep(60)", silent=False, block=False)
    time.sleep(1)
    cluster3.signal("SIGINT", [0, 1])
    late = threading.Timer(0.5, os.kill, (cluster3.ranks[2].pid, signal.SIGINT))
    late.start()
    try:
        with pytest.raises(RankError) as caught:
            shell.run_cell_magic("px", "", "ran_it = True")
    finally:
        late.join()
    assert 2 in caught.value.failed and caught.value.failed[2] == DROPPED, str(caught.value)
    cluster3.view.execute("ran = globals().pop('ran_it', False)", block=True)
    ran = cluster3.view.pull("ran", block=True)
    assert [r for r in range(3) if not ran[r]] == sorted(caught.value.failed), (ran, caught.value)


def test_the_cell_after_an_interrupted_one_runs_on_every_rank(cluster3):
    """The stop button (a KeyboardInterrupt in the kernel) during a %%px cell, and the next
    cell at once: the interrupted cell waits until every rank has answered it, so the next one
    reaches no engine still busy with it (which would drop it). 3 rounds."""
    import _thread
    import threading

    import pytest

    from helpers.cluster.interrupts import Interrupted

    shell = _magic(cluster3)
    for round_ in range(3):  # the cells sleep longer than the cluster's cell_timeout (60 s)
        threading.Timer(1.0, _thread.interrupt_main).start()
        with pytest.raises(Interrupted, match=r"rank\(s\) \[0, 1, 2\] stopped"):
            shell.run_cell_magic("px", "", "import time\ntime.sleep(600)")
        shell.run_cell_magic("px", "", f"answered = {round_}")
        got = cluster3.view.pull("answered", block=True)
        assert got == [round_] * 3, f"round {round_}: ranks answered {got}"


def test_timestamps_are_parsed_as_ipyparallel_parses_them_and_by_the_course_parser():
    """helpers.cluster.px replaces ipyparallel's timestamp parser (dateutil's, about 0.1 ms a call)
    with datetime.fromisoformat where that gives the same aware datetime."""
    import warnings
    from datetime import UTC, timedelta

    from dateutil.parser import parse as general
    from ipyparallel import util
    from ipyparallel.client import asyncresult

    from helpers.cluster.replies import parse_date

    assert util._parse_date is parse_date and asyncresult._parse_date is parse_date
    for text in ["2026-11-22T18:09:57.123456+00:00", "2026-11-22T18:09:57.123456Z",
                 "2026-11-22T18:09:57Z", "2026-11-22T18:09:57.1+05:30",
                 "2026-11-22T18:09:57.123-0800", util.utcnow().isoformat()]:
        got, expected = parse_date(text), general(text)
        assert got == expected and got.utcoffset() == expected.utcoffset(), (text, got, expected)
    assert parse_date("2026-11-22T18:09:57.5+01:00") == \
        general("2026-11-22T18:09:57.5Z") - timedelta(hours=1)
    assert parse_date("2026-11-22T18:09:57Z").tzinfo == UTC
    for other in ["hello", "2026-11-22", "", None]:  # not ISO 8601 timestamps: unchanged
        assert parse_date(other) == other
    with warnings.catch_warnings(record=True):  # no time zone: ipyparallel's way (local time)
        warnings.simplefilter("always")
        naive = parse_date("2026-11-22T18:09:57.25")
    assert naive.tzinfo is not None
    assert naive.replace(tzinfo=None) == general("2026-11-22T18:09:57.25")


def test_a_px_cell_names_a_dead_controller_at_once():
    """The magic checks the controller only when no answer came within the first poll."""
    import signal
    import time

    import pytest

    from helpers import start_cluster
    from helpers.cluster.px import RankError

    with start_cluster(n=2, activate=False, cell_timeout=20) as cluster:
        shell = _magic(cluster)
        for pid in cluster._controller_pids:  # the hub and its schedulers
            os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RankError, match="the controller is gone") as err:
            shell.run_cell_magic("px", "", "x = 1")
        # named at once: a wait that ran to the cell's timeout (20 s) would take all of it
        assert time.monotonic() - start < 20 and "did not answer" not in str(err.value)
