"""Is this machine ready to teach the course? `make check` answers the day before a workshop.

It prints one table: versions, the GPUs and what start_cluster() will choose on them, a real
cluster start with an all_reduce on every backend the course uses here (nccl on GPUs, gloo on
CPU ranks) and its time, the point-to-point and all_reduce bandwidth beside the figures stored
in notebook 02, the free disk where checkpoints go, and which optional parts are present.
Each line that is not fine says what to do. The exit status is 1 if a line is a blocker.

    .venv/bin/python -m helpers.machine.preflight        (what `make check` runs)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..cluster.launchers import slurm
from ..text import format_bytes, table
from . import torch_build

OK, NOTE, BLOCKER = "ok", "note", "BLOCKER"
PINNED = {"torch": torch_build.REQUIREMENT, "ipyparallel": "9.2.0"}
NOTEBOOK_02 = Path(__file__).resolve().parents[2] / "notebooks" / "02_collectives.ipynb"


@dataclass
class Line:
    """One line of the report: what was checked, what was found, and what to do about it."""

    what: str
    found: str
    verdict: str = OK
    todo: str = ""


# ---- verdicts: pure functions of what was found -------------------------------------------
def python_line(version: tuple[int, int, int]) -> Line:
    found = ".".join(map(str, version))
    if version < (3, 11):
        return Line("Python", found, BLOCKER, "install Python 3.11 and run PYTHON=python3.11 make")
    return Line("Python", found)


def package_line(name: str, version: str | None) -> Line:
    if version is None:
        return Line(name, "not installed", BLOCKER, "run `make install`")
    if name == "torch":
        if not torch_build.in_range(version):
            tested = " and ".join(torch_build.TESTED)
            return Line(name, version, NOTE, f"the course is tested with {tested} "
                        f"({torch_build.REQUIREMENT}); `make clean install` installs one in range")
        return Line(name, version)
    if version.split("+")[0] != PINNED[name]:
        return Line(name, version, NOTE, f"the course is tested with {PINNED[name]}; "
                    "`make clean install` installs it")
    return Line(name, version)


def disk_line(path: str, free: int) -> Line:
    found = f"{format_bytes(free)} free in {path}"
    if free < 200 * 2**20:
        return Line("disk for checkpoints", found, BLOCKER,
                    "free some space, or set TMPDIR to a disk with room (notebook 05 saves there)")
    if free < 2 * 2**30:
        return Line("disk for checkpoints", found, NOTE, "enough for the course; little to spare")
    return Line("disk for checkpoints", found)


def bandwidth_line(what: str, measured: float, stored: float | None) -> Line:
    found = f"{measured / 1e6:.0f} MB/s"
    if stored is None:
        return Line(what, found + " (no stored figure to compare with)", NOTE)
    found += f", {measured / stored:.2f}x the {stored / 1e6:.0f} MB/s stored in notebook 02"
    if measured < stored / 10:
        return Line(what, found, NOTE, "a tenth of the stored figure: is the machine busy? "
                    "the course still runs, but timings in the notebooks will differ a lot")
    return Line(what, found)


def class_line(learners: int, cores: int, memory: int, gpus: int, ranks: int,
               rank_bytes: int, kernel_bytes: int) -> Line:
    """Whether this machine holds a class of `learners`, each with a JupyterLab, a kernel and a
    cluster of `ranks` CPU ranks (or their share of the GPUs, where that is 2 or more each),
    from the memory one rank and the rest (kernel_bytes: a kernel, a fork server and a
    JupyterLab server) took here, just after the start (measured by make check: proportional
    set sizes; what the notebooks compute adds to it).
    CPU ranks may share cores, as this course's own 2-core test machine runs 4 ranks: twice as
    many ranks as cores is slow but works; four times as many is too slow to teach with."""
    each = gpus // learners if gpus else 0
    if each >= 2:
        ranks, kind = each, f"{each} GPUs and {each} ranks (nccl)"
    else:
        kind = f"{ranks} CPU ranks (gloo)" + (f": {gpus} GPUs do not give each 2" if gpus else "")
    needed = learners * (kernel_bytes + ranks * rank_bytes)
    per_core = learners * ranks / max(cores, 1)
    found = (f"{learners} learners: each {kind}, {format_bytes(kernel_bytes + ranks * rank_bytes)}"
             f" of memory; in all {format_bytes(needed)} of {format_bytes(memory)}, "
             f"{learners * ranks} ranks on {cores} cores")
    what = f"a class of {learners}"
    if needed > 0.9 * memory:
        return Line(what, found, BLOCKER, "not enough memory: fewer learners, or fewer ranks "
                    "per learner (make hub RANKS_EACH=2)")
    if each < 2 and per_core > 4:
        return Line(what, found, BLOCKER, f"{per_core:.0f} ranks per core: fewer learners, or "
                    "RANKS_EACH=2, or a machine with more cores")
    if each < 2 and per_core > 2 or needed > 0.7 * memory:
        return Line(what, found, NOTE, "it fits, with little to spare: cells will be slow")
    return Line(what, found)


def optional_line(what: str, present: bool, use: str) -> Line:
    return Line(what, "present" if present else "absent", OK if present else NOTE,
                "" if present else f"only needed {use}")


def stored_bandwidths(notebook: Path = NOTEBOOK_02) -> dict[str, float]:
    """The all_reduce bus and send/recv bandwidths (bytes/s) stored in notebook 02's outputs."""
    try:
        text = json.dumps(json.loads(notebook.read_text()))
    except (OSError, ValueError):
        return {}
    found = {}
    arrow = r"(?:\\u2192|→)"  # 0→1, as json.dumps may have escaped it
    for key, pattern in (("all_reduce", r"all_reduce bus bandwidth\s+([0-9.]+) MB/s"),
                         ("send/recv", rf"send/recv (?:bandwidth )?0{arrow} ?1\s+([0-9.]+) MB/s")):
        if key not in found and (m := re.search(pattern, text)):
            found[key] = float(m.group(1)) * 1e6
    return found


# ---- measurements: real clusters -------------------------------------------------------
def _measure(nbytes: int, repeats: int) -> dict[str, float]:
    """On every rank: seconds of send/recv 0->1 and of all_reduce (slowest rank, median)."""
    import torch
    import torch.distributed as dist

    from helpers.cluster.engine import whereami
    from helpers.taught import send_0_to_1
    from helpers.timing import time_on_all_ranks

    _, _, device = whereami()
    x = torch.ones(nbytes // 4, device=device)
    return {"send/recv": time_on_all_ranks(lambda: send_0_to_1(x), device, repeats=repeats),
            "all_reduce": time_on_all_ranks(lambda: dist.all_reduce(x), device, repeats=repeats)}


def cluster_lines(backend: str, n: int, nbytes: int = 16 * 2**20) -> list[Line]:
    """Start a cluster of n ranks on backend, all_reduce, time it; bandwidths on 2+ ranks."""
    from .. import start_cluster
    from ..timing import algbw, busbw

    what = f"cluster: {n} rank(s), {backend}"
    started = time.perf_counter()
    try:
        cluster = start_cluster(n=n, backend=backend, activate=False, start_timeout=120)
    except Exception as e:  # noqa: BLE001 - every failure is reported, with what to do
        return [Line(what, f"did not start: {str(e).splitlines()[0][:120]}", BLOCKER,
                     "read the error; `make test` runs the same cluster with more detail")]
    try:
        cluster.px("t = torch.ones(1, device=device); dist.all_reduce(t)\n"
                   "assert t.item() == world_size, f'rank {rank}: {t.item()}'")
        where = cluster.launcher.describe()
        lines = [Line(what, f"started and all-reduced in {time.perf_counter() - started:.1f} s"
                            f" (devices {sorted({r.device for r in cluster.ranks})}{where})")]
        MEASURED["rank"] = max(_share_bytes(r.pid) for r in cluster.ranks)
        server = getattr(cluster.launcher, "forkserver", None)  # what the engines fork from
        MEASURED["forkserver"] = _share_bytes(server.proc.pid) if server else 0
        if n >= 2:
            times = cluster.view.apply_sync(_measure, nbytes, 5)[0]
            stored = stored_bandwidths() if backend == "gloo" else {}
            lines.append(bandwidth_line(
                f"send/recv 0->1, {format_bytes(nbytes)}",
                algbw(nbytes, times["send/recv"]), stored.get("send/recv")))
            lines.append(bandwidth_line(
                f"all_reduce bus bandwidth, {format_bytes(nbytes)}",
                busbw("all_reduce", nbytes, times["all_reduce"], n), stored.get("all_reduce")))
        return lines
    except Exception as e:  # noqa: BLE001 - every failure is reported, with what to do
        return [Line(what, f"failed: {str(e).splitlines()[0][:120]}", BLOCKER,
                     "read the error; `make test` runs the same checks with more detail")]
    finally:
        cluster.stop()


def torch_build_line(cuda: str | None, gpus: int, env_bytes: int) -> Line:
    """Which PyTorch build is installed (torch.version.cuda: None for the CPU build) against
    the GPUs this machine has, with the size of the environment it lives in."""
    build = f"CUDA {cuda} build" if cuda else "CPU build"
    found = f"{build}; environment {format_bytes(env_bytes)}"
    if cuda and not gpus:
        return Line("PyTorch build", found, NOTE, "no GPU here: `make clean install` with "
                    "COURSE_TORCH=cpu installs the CPU build, a few hundred MB")
    if not cuda and gpus:
        return Line("PyTorch build", found, NOTE, "the GPUs go unused (CPU ranks, gloo): "
                    "`make clean install` with COURSE_TORCH=cuda installs the CUDA build")
    return Line("PyTorch build", found)


def environment_bytes(prefix: str = sys.prefix) -> int:
    """The size of the files of the environment (the virtual environment's folder)."""
    total = 0
    for root, _, files in os.walk(prefix):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


# bytes, as cluster_lines measured them: one rank's memory, and its fork server's
MEASURED: dict[str, int] = {}


def _share_bytes(pid: int) -> int:
    """This process's share of the memory (its proportional set size: a page it shares with
    n processes counts 1/n: the engines share most of theirs with their fork server)."""
    import psutil

    try:
        return psutil.Process(pid).memory_full_info().pss
    except psutil.Error:
        return 0


def lab_bytes(timeout: float = 60) -> int:
    """What a JupyterLab server holds just after it starts (each learner has one under
    `make hub`): its proportional set size; 0 where it did not start."""
    import subprocess
    import urllib.request

    token = os.urandom(8).hex()
    with tempfile.TemporaryDirectory() as root:
        # the port it took, from the file it writes where it runs (no port picked beforehand
        # that another process could take meanwhile)
        runtime = Path(root) / "runtime"
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}",
             f"--ServerApp.root_dir={root}", *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout
            while server.poll() is None and time.monotonic() < deadline:
                try:
                    port = json.loads((runtime / f"jpserver-{server.pid}.json").read_text())["port"]
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token="
                                                f"{token}", timeout=5):
                        return _share_bytes(server.pid)
                except (OSError, ValueError, KeyError):  # not written or not answering yet
                    time.sleep(0.2)
            return 0
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def report() -> list[Line]:
    """Every check, in the order of the table."""
    from ..cluster.launchers.base import visible_gpus
    from ..cluster.stacks import py_spy
    from ..cluster.topology import choose_backend, resolve_world_size

    lines = [python_line(sys.version_info[:3])]
    for name in PINNED:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = None
        lines.append(package_line(name, version))
    gpus = visible_gpus()
    if importlib.util.find_spec("torch") is not None:
        import torch

        lines.append(torch_build_line(torch.version.cuda, gpus, environment_bytes()))
    try:
        n = resolve_world_size(None, gpus)
        backend = choose_backend(n, gpus)
        lines.append(Line("GPUs visible", str(gpus)))
        lines.append(Line("start_cluster() will choose", f"{n} rank(s), {backend}"))
    except ValueError as e:
        return [*lines, Line("start_cluster() will choose", str(e), BLOCKER,
                             "fix COURSE_WORLD_SIZE / COURSE_BACKEND")]
    if backend == "nccl":
        lines += cluster_lines("nccl", n)
    lines += cluster_lines("gloo", 4 if backend == "gloo" else 2)
    if (learners := os.environ.get("COURSE_CLASS_SIZE", "").strip()) and MEASURED.get("rank"):
        import psutil

        try:
            count = int(learners)
        except ValueError:
            count = 0
        if count < 1:
            lines.append(Line("a class", f"CLASS={learners!r}", BLOCKER,
                              "give the number of learners: make check CLASS=20"))
        else:
            # make hub's settings, where make check is given them (RANKS_EACH=, GPUS=)
            ranks = os.environ.get("COURSE_CLASS_RANKS", "").strip()
            shared = os.environ.get("COURSE_CLASS_GPUS", "").strip()
            lines.append(class_line(count, os.cpu_count() or 1, psutil.virtual_memory().total,
                                    int(shared) if shared.isdigit() else gpus,
                                    resolve_world_size(int(ranks) if ranks.isdigit() else None,
                                                       0),
                                    MEASURED["rank"],
                                    _share_bytes(os.getpid()) + MEASURED["forkserver"]
                                    + lab_bytes()))
    checkpoints = tempfile.gettempdir()
    lines.append(disk_line(checkpoints, shutil.disk_usage(checkpoints).free))
    lines.append(optional_line("py-spy (stacks of stuck ranks)", py_spy() is not None,
                               "for cluster.stacks() (notebook 06 falls back to faulthandler)"))
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    lines.append(optional_line("Chromium", bool(browser),
                               "for `make browser` (the browser suite, which CI runs)"))
    lines.append(optional_line(f"Slurm ({', '.join(slurm.COMMANDS)})",
                               not slurm.missing_commands(),
                               "for COURSE_LAUNCHER=slurm (README) and notebook 07's job "
                               "submission (it skips it otherwise)"))
    lines.append(optional_line("npm", bool(shutil.which("npm")),
                               "for `make hub` (a workshop server: JupyterHub's proxy)"))
    mpi = [shutil.which(c) for c in ("mpiexec", "unshare", "ip")]
    lines.append(optional_line("MPI (mpiexec, mpi4py, unshare, ip)",
                               all(mpi) and importlib.util.find_spec("mpi4py") is not None,
                               "for COURSE_LAUNCHER=mpi (README)"))
    return lines


def main() -> int:
    os.environ.setdefault("IPP_NONINTERACTIVE", "1")
    started = time.perf_counter()
    lines = report()
    rows = [("check", "found", "verdict", "what to do")]
    rows += [(ln.what, ln.found, ln.verdict, ln.todo) for ln in lines]
    print(table(rows))
    blockers = [ln for ln in lines if ln.verdict == BLOCKER]
    print(f"\n{len(blockers)} blocker(s); checked in {time.perf_counter() - started:.0f} s. "
          + ("This machine is ready for the course." if not blockers else
             "Fix the lines marked BLOCKER, then run `make check` again."))
    return 1 if blockers else 0


if __name__ == "__main__":
    sys.exit(main())
