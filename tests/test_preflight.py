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


def test_a_class_fits_or_says_what_to_change():
    gib = 2**30
    # 20 learners on 64 cores and 256 GiB, 4 CPU ranks each: 80 ranks, 1.25 per core
    fits = preflight.class_line(20, 64, 256 * gib, 0, 4, gib // 2, gib)
    assert fits.verdict == OK, fits
    assert "20 learners: each 4 CPU ranks (gloo), 3 GiB" in fits.found
    assert "in all 60 GiB of 256 GiB, 80 ranks on 64 cores" in fits.found
    tight = preflight.class_line(20, 32, 256 * gib, 0, 4, gib // 2, gib)  # 2.5 ranks a core
    assert tight.verdict == NOTE and "slow" in tight.todo
    cramped = preflight.class_line(40, 32, 256 * gib, 0, 4, gib // 2, gib)  # 5 ranks a core
    assert cramped.verdict == BLOCKER and "5 ranks per core" in cramped.todo
    short = preflight.class_line(20, 64, 32 * gib, 0, 4, gib // 2, gib)  # 60 GiB needed
    assert short.verdict == BLOCKER and "not enough memory" in short.todo
    # a GPU node: 8 GPUs for 4 learners is 2 each (nccl); for 5, fewer than 2: CPU ranks
    gpus = preflight.class_line(4, 64, 512 * gib, 8, 4, gib, 2 * gib)
    assert gpus.verdict == OK and "each 2 GPUs and 2 ranks (nccl)" in gpus.found
    few = preflight.class_line(5, 64, 512 * gib, 8, 4, gib, 2 * gib)
    assert "4 CPU ranks (gloo): 8 GPUs do not give each 2" in few.found


def test_the_figures_stored_in_notebook_02_are_found():
    stored = preflight.stored_bandwidths()
    assert set(stored) == {"all_reduce", "send/recv"} and all(v > 0 for v in stored.values())


def test_make_check_passes_on_this_machine():
    import os

    done = subprocess.run([sys.executable, "-m", "helpers.machine.preflight"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, COURSE_CLASS_SIZE="2"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "This machine is ready for the course." in done.stdout
    assert "cluster: 4 rank(s), gloo" in done.stdout and "started and all-reduced" in done.stdout
    # a class of 2 on this machine: the memory measured here, per learner and in all
    assert "a class of 2" in done.stdout and "2 learners: each" in done.stdout, done.stdout
    import torch

    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    assert f"{build}; environment " in done.stdout, done.stdout


def test_a_learners_jupyterlab_is_measured_and_ended():
    """make check CLASS= counts a JupyterLab server per learner: a real one, started, measured
    (tens of MiB at least) and ended."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert preflight.lab_bytes() > 20 * 2**20
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
