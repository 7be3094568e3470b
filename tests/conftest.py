"""Fixtures shared by the unit tests (the suite-wide leak guard is the root conftest.py)."""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # figures are drawn off-screen, before pyplot loads

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group():
    """A gloo process group of this test process alone (in-memory store), destroyed after."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _shared_cluster(n: int, session: pytest.Session):
    """A gloo cluster of n ranks that is not this process's current cluster, stopped at the end
    of the session, or before the first notebook runs (the root conftest.py): idle, its
    engines still cost the notebooks a few percent of a core.

    Tests must leave it working: no killed ranks, no broken group.
    """
    from helpers.cluster import Cluster

    cluster = Cluster(n, "gloo", timeout=10, start_timeout=60, cell_timeout=60)
    session.__dict__.setdefault("course_shared_clusters", []).append(cluster)
    try:
        cluster.start(activate=False)
        yield cluster
    finally:
        cluster.stop()


def _healthy(cluster):
    """The shared cluster, restarted first if one of its ranks died in an earlier test, so that
    one crash fails one test, not every test after it. (A planted wrong answer once crashed an
    engine: a segfault inside gloo while its timed-out group was replaced.)"""
    from helpers.cluster.replies import dead_ranks

    if cluster.client is None:
        pytest.fail("the shared test cluster was stopped when the notebooks began: run the unit "
                    "tests before the notebooks (as `make test` does)")
    if cluster.controller_gone() or dead_ranks(cluster.ranks):
        cluster.restart()
    return cluster


@pytest.fixture(scope="session")
def _cluster2_shared(request):
    yield from _shared_cluster(2, request.session)


@pytest.fixture(scope="session")
def _cluster3_shared(request):
    yield from _shared_cluster(3, request.session)


@pytest.fixture(scope="session")
def _cluster4_shared(request):
    yield from _shared_cluster(4, request.session)


@pytest.fixture
def cluster2(_cluster2_shared):
    """2 ranks, for answers that are wrong already at the smallest pair (and at 1 rank alone)."""
    return _healthy(_cluster2_shared)


@pytest.fixture
def cluster3(_cluster3_shared):
    """3 ranks, shared by the tests whose subject is not the cluster itself: an odd number, so
    that code right only for powers of two fails, and one rank fewer is still 2."""
    return _healthy(_cluster3_shared)


@pytest.fixture
def cluster4(_cluster4_shared):
    """4 ranks, the course's default on CPUs: for answers that are right only at 3 ranks."""
    return _healthy(_cluster4_shared)
