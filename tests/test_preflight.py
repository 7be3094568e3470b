"""`make check`: the verdicts of the preflight on made-up findings, and one real run here."""

from __future__ import annotations

import subprocess
import sys

from helpers.machine import preflight
from helpers.machine.preflight import BLOCKER, NOTE, OK


def test_verdicts_say_what_to_do():
    assert preflight.python_line((3, 10, 2)).verdict == BLOCKER
    assert preflight.python_line((3, 11, 7)).verdict == OK
    missing = preflight.package_line("torch", None)
    assert missing.verdict == BLOCKER and "make install" in missing.todo
    other = preflight.package_line("torch", "2.9.1+cu128")
    assert other.verdict == NOTE and "2.13.0" in other.todo
    assert preflight.package_line("torch", "2.13.0+cpu").verdict == OK
    assert preflight.disk_line("/tmp", 50 * 2**20).verdict == BLOCKER
    assert "TMPDIR" in preflight.disk_line("/tmp", 50 * 2**20).todo
    assert preflight.disk_line("/tmp", 100 * 2**30).verdict == OK
    slow = preflight.bandwidth_line("all_reduce", 10e6, 400e6)
    assert slow.verdict == NOTE and "busy" in slow.todo and "0.03x" in slow.found
    assert preflight.bandwidth_line("all_reduce", 500e6, 400e6).verdict == OK
    cuda_here = preflight.torch_build_line("13.0", 0, 4_300 * 2**20)
    assert cuda_here.verdict == NOTE and "COURSE_TORCH=cpu" in cuda_here.todo
    assert "CUDA 13.0 build" in cuda_here.found and "4.2 GiB" in cuda_here.found
    cpu_on_gpus = preflight.torch_build_line(None, 8, 700 * 2**20)
    assert cpu_on_gpus.verdict == NOTE and "COURSE_TORCH=cuda" in cpu_on_gpus.todo
    assert preflight.torch_build_line(None, 0, 10).verdict == OK
    assert preflight.torch_build_line("13.0", 2, 10).verdict == OK
    absent = preflight.optional_line("Slurm", False, "on a cluster")
    assert absent.verdict == NOTE and absent.todo == "only needed on a cluster"


def test_the_figures_stored_in_notebook_02_are_found():
    stored = preflight.stored_bandwidths()
    assert set(stored) == {"all_reduce", "send/recv"} and all(v > 0 for v in stored.values())


def test_make_check_passes_on_this_machine():
    done = subprocess.run([sys.executable, "-m", "helpers.machine.preflight"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "This machine is ready for the course." in done.stdout
    assert "cluster: 4 rank(s), gloo" in done.stdout and "started and all-reduced" in done.stdout
    import torch

    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    assert f"{build}; environment " in done.stdout, done.stdout
