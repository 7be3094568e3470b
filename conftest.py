"""Suite-wide settings and guard, for unit tests and notebooks alike: stored outputs are
compared non-interactively, and no test or notebook may leave a course process behind."""

from __future__ import annotations

import os
import time
import uuid

import psutil
import pytest

from helpers.cluster.watchdog import course_processes, end_processes

os.environ.setdefault("IPP_NONINTERACTIVE", "1")
# every process this run starts (kernels, controllers, engines) inherits this tag, so the
# check below finds this run's processes only, never those of another notebook or test run
SESSION_TAG = "COURSE_TEST_SESSION"
os.environ[SESSION_TAG] = uuid.uuid4().hex


def _ours() -> list[psutil.Process]:
    """Course processes started by this test run."""
    procs = []
    for p in course_processes():
        try:
            if p.environ().get(SESSION_TAG) == os.environ[SESSION_TAG]:
                procs.append(p)
        except psutil.Error:
            pass
    return procs


@pytest.fixture
def own_processes():
    """A function listing the course processes this test run started (not other users')."""
    return _ours


# suites that start clusters or browsers of their own, on the machine's every core: they run
# after the unit tests, once the clusters those share are stopped (idle, their engines and
# controllers would still cost the others a good part of 2 cores)
SYSTEM_SUITES = ("test_browser.py", "test_mpi.py", "test_slurm.py")


def _phase(item: pytest.Item) -> int:
    """0: unit tests (may share clusters), 1: system suites, 2: notebooks."""
    if item.path.suffix == ".ipynb":
        return 2
    return 1 if item.path.name in SYSTEM_SUITES else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first, then the system suites, then the notebooks (a stable sort)."""
    items.sort(key=_phase)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first system suite or notebook, stop the clusters the unit tests shared
    (tests/conftest.py)."""
    shared = item.session.__dict__.get("course_shared_clusters")
    if shared and _phase(item) > 0:
        for cluster in shared:
            cluster.stop()
        shared.clear()


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
