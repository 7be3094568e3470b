"""benchmarks/gpu_check.py without a GPU: every check's code compiles and sets its finding,
and the GPU part says it skipped."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check


@pytest.mark.parametrize("name", list(gpu_check.CHECKS))
def test_each_check_compiles_and_ends_with_a_finding(name):
    code = textwrap.dedent(gpu_check.CHECKS[name])
    compile(code, name, "exec")
    assert any(line.startswith("found = ") for line in code.splitlines()), name


def test_without_cuda_the_gpu_part_says_it_skipped(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    body, ok = gpu_check.gpu_checks()
    assert ok and body.startswith("skipped: torch sees no CUDA device")
