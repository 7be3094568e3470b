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


def _shared_cluster(n: int):
    """A gloo cluster of n ranks that is not this process's current cluster, stopped at the end.

    Tests must leave it working: no killed ranks, no broken group.
    """
    from helpers.cluster import Cluster

    cluster = Cluster(n, "gloo", timeout=10, start_timeout=60, cell_timeout=60)
    try:
        cluster.start(activate=False)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def cluster3():
    """3 ranks, shared by the tests whose subject is not the cluster itself: an odd number, so
    that code right only for powers of two fails, and one rank fewer is still 2."""
    yield from _shared_cluster(3)


@pytest.fixture(scope="session")
def cluster4():
    """4 ranks, the course's default on CPUs: for answers that are right only at 3 ranks."""
    yield from _shared_cluster(4)
