"""Ctrl-C at any instant (helpers/interrupts.py): cluster.px and cluster.interrupt() stop what
runs on the ranks, drop what has not begun, and lose no reply; the next request runs on every
rank. Judged without a clock: the stopped code sleeps 600 s, far past every wait here, so code
that ended at all was stopped."""

from __future__ import annotations

import _thread
import os
import random
import signal
import threading

import pytest

from helpers.cluster.interrupts import Interrupted


def _everyone_answers(cluster, value: int) -> None:
    cluster.px(f"answered = {value}")
    got = cluster.view.pull("answered", block=True)
    assert got == [value] * cluster.world_size, f"ranks answered {got}, expected {value} on each"


def test_ctrl_c_during_cluster_px_stops_every_rank_and_says_so(cluster3):
    for round_ in range(2):
        threading.Timer(0.5, _thread.interrupt_main).start()
        with pytest.raises(Interrupted, match=r"rank\(s\) \[0, 1, 2\] stopped"):
            cluster3.px("import time\ntime.sleep(600)")
        _everyone_answers(cluster3, round_)


def test_cluster_interrupt_at_once_after_a_request_drops_or_stops_it_on_every_rank(cluster3):
    """The request may still be on its way to some engines when interrupt() runs: those drop
    it (their reply says aborted), the others stop it; none runs it to its end."""
    from ipyparallel import error as ipp_error

    for round_ in range(10):
        result = cluster3.view.execute("import time\ntime.sleep(600)", block=False)
        cluster3.interrupt()
        assert result.wait(60), f"round {round_}: the request still runs after interrupt()"
        for rank, future in enumerate(result._children):
            err = future.exception() or future.result()
            assert isinstance(err, ipp_error.TaskAborted) or getattr(
                err, "ename", None) == "KeyboardInterrupt", f"round {round_}, rank {rank}: {err!r}"
        _everyone_answers(cluster3, round_)


def test_sigint_at_random_instants_around_short_requests_loses_no_reply(cluster3):
    """SIGINT to an engine while it takes a request in, runs it or sends its reply: the reply
    always comes (ok, or KeyboardInterrupt), never lost in the engine's machinery."""
    gen = random.Random(5)
    pid = cluster3.ranks[1].pid
    engine = cluster3.client[cluster3.ranks[1].engine_id]
    outcomes = {"ok": 0, "KeyboardInterrupt": 0}
    for round_ in range(200):
        result = engine.execute(f"x = {round_}", block=False)
        threading.Event().wait(gen.uniform(0, 0.004))
        os.kill(pid, signal.SIGINT)
        assert result.wait(60), f"round {round_}: no reply (lost in the engine's machinery?)"
        err = result._children[0].result()
        kind = "ok" if not isinstance(err, BaseException) else getattr(err, "ename", repr(err))
        assert kind in outcomes, f"round {round_}: {kind}"
        outcomes[kind] += 1
        cluster3.interrupt([1])  # waits until the engine is free for the next request
    print(outcomes)
    _everyone_answers(cluster3, 7)
