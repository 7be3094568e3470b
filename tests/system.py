"""Tests that need a part of the system a learner's laptop may lack (root, Chromium, Slurm, MPI).

On a learner's machine such a test skips with a one-line reason. In CI, `.ci/run` installs
those parts and sets COURSE_REQUIRE_SYSTEM=1: a test that would skip fails instead, so that
CI always runs them.
"""

from __future__ import annotations

import os

import pytest

REQUIRE = "COURSE_REQUIRE_SYSTEM"


def need(available: object, reason: str) -> None:
    """Skip with reason when not available, or fail under COURSE_REQUIRE_SYSTEM=1."""
    if available:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: CI must run this test)")
    pytest.skip(reason)
