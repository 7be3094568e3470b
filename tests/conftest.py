"""Suite-wide guard: no test or notebook may leave a course process behind."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from helpers.watchdog import course_processes, end_processes

os.environ.setdefault("IPP_NONINTERACTIVE", "1")
# Every process this session starts (clusters, notebook kernels and their clusters) inherits
# this mark; processes of another session running at the same time do not carry it.
_SESSION = f"{os.getpid()}-{time.time()}"
os.environ["COURSE_TEST_SESSION"] = _SESSION


def _ours() -> list[psutil.Process]:
    """Course processes started by this test session (so not another user's, nor another run's)."""
    procs = []
    for p in course_processes():
        try:
            if p.environ().get("COURSE_TEST_SESSION") == _SESSION:
                procs.append(p)
        except psutil.Error:
            pass
    return procs


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if engines or controllers survive it, then end them (they are ours)."""
    deadline = time.time() + 10  # nannies and guards may still be exiting
    while (left := _ours()) and time.time() < deadline:
        time.sleep(0.25)
    if left:
        described = [f"{p.pid} {' '.join(p.cmdline()[1:4])}" for p in left if p.is_running()]
        print(f"\nLEAK: course processes left after the suite: {described}")
        end_processes(left)
        session.exitstatus = 1
