"""Failure reports name ranks and say what to do (pure parts of helpers.px)."""

import os
import subprocess
import sys

from helpers.px import describe_failure, is_dead


def test_dead_rank_report_names_it_and_the_survivors_errors():
    text = describe_failure({0: "RuntimeError: Connection closed by peer"}, [2], [1], 30)
    assert text.startswith("rank(s) [2] died")
    assert "rank 0: RuntimeError: Connection closed by peer" in text
    assert "rank 1: still running (waiting for the dead rank" in text
    assert "rank 2: process gone" in text and "cluster.restart()" in text


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
