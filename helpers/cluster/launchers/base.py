"""What every launcher is: the base class, what a launcher reads of its cluster, and a rank.

Introduced in notebook 00 (``start_cluster()``). Each launcher (``local``, ``mpi``, ``slurm``
in this package) subclasses ``Launcher`` and overrides what it does differently; the
``Cluster`` holds what is common to all of them and asks its launcher for the rest, through
the members that ``ClusterView`` lists (and nothing else of the cluster).
"""

from __future__ import annotations

import importlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from ..topology import loopback_interface
from ..watchdog import MARKER, end_processes


@dataclass(frozen=True)
class RankInfo:
    """Where one rank lives: its engine, its processes and its device."""

    rank: int
    local_rank: int
    engine_id: int
    pid: int
    nanny_pid: int | None
    host: str
    device: str
    remote: bool = False  # on another host than the kernel (Slurm): reached through Slurm


class ClusterView(Protocol):
    """What a launcher reads and asks of the cluster it starts engines for (``core.Cluster``)."""

    world_size: int
    start_timeout: float
    sbatch: list[str]
    dir: Path  # the cluster's private folder
    generation: int  # how many times the group has been formed
    starts: int  # how many times engines have been started
    ranks: list[RankInfo]
    client: Any  # the ipyparallel Client
    controller: Any  # its Controller

    def engine_env(self) -> dict[str, str]: ...

    def engine_argv(self) -> list[str]: ...

    def gather(self, pending: dict[int, Any], what: str) -> list[Any]: ...

    def tell_guard(self, line: str) -> None: ...


# the device files a GPU torch.cuda can use needs: NVIDIA's driver, WSL's GPU, AMD's ROCm
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def gpu_device_files(exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """Which of GPU_DEVICE_FILES this machine has (none: torch.cuda can see no GPU)."""
    return [path for path in GPU_DEVICE_FILES if exists(path)]


def visible_gpus(exists: Callable[[str], bool] = os.path.exists) -> int:
    """Number of CUDA GPUs this process can see (0 on a CPU-only build or machine).

    Without a GPU device file the answer is 0 and torch is not imported here: it is imported
    in a background thread instead, while the controller and the engines start (a second of
    CPU that would otherwise come first), so that the notebook's own cells find it loaded.
    """
    if not gpu_device_files(exists):
        threading.Thread(target=importlib.import_module, args=("torch",), daemon=True,
                         name="import torch").start()
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def log_tail(path: str | Path | None, lines: int = 8) -> str:
    """The last lines of an engine or controller log, indented, for error messages."""
    try:
        text = Path(path).read_text(errors="replace").splitlines()[-lines:]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return "    (no log)"
    return "\n".join("    " + line for line in text) or "    (empty log)"


class Launcher:
    """What every launcher does, and the defaults of one whose engines run on this machine."""

    name = ""
    spans_hosts = False  # can spread the ranks over several hosts (nodes > 1)
    shared_log = False  # all engines write one log (one mpiexec, one Slurm job)

    # ---- before the cluster exists ----------------------------------------------------
    @classmethod
    def gpus(cls, sbatch: list[str] | str | None, hosts: int) -> int:
        """GPUs the ranks can use: this machine's."""
        return visible_gpus()

    @classmethod
    def job_options(cls, sbatch: list[str] | str | None, world_size: int, hosts: int) -> list[str]:
        """Options of the engines' job (none: there is no job)."""
        return []

    @classmethod
    def default_nodes(cls) -> int | None:
        """Hosts to spread the ranks over when neither nodes= nor $COURSE_NODES says."""
        return None

    @classmethod
    def check_ready(cls) -> None:
        """Raise a ClusterError saying what to install if this machine cannot launch."""

    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster
        self.controller_ip = "127.0.0.1"  # where engines reach the controller

    # ---- where things live --------------------------------------------------------------
    @staticmethod
    def make_dir() -> tuple[Path, Path]:
        """The cluster's private folder, and the folder of the controller's sockets."""
        folder = Path(tempfile.mkdtemp(prefix="course-cluster-"))
        return folder, folder

    def engine_env(self) -> dict[str, str]:
        """What the engines' environment adds: the cluster's tag, by which the guard finds them."""
        return {MARKER: str(self.cluster.dir)}

    def controller_launch(self) -> dict[str, Any]:
        """How ipyparallel runs the controller (here: as it does by default)."""
        return {}

    def engine_ip(self) -> str | None:
        """The TCP address engines reach the controller at; None: Unix sockets here."""
        return None

    # ---- the engines' life ----------------------------------------------------------------
    def prepare(self) -> None:
        """Work that can overlap the controller's start."""

    def start_engines(self, logs: list[Path]) -> list[int]:
        """Start the engines; the pids to watch while they register."""
        raise NotImplementedError

    def watch_start(self, log: Path, registered: int, deadline: float) -> None:
        """Called while engines register: raise a ClusterError if they never will."""

    def threads(self, ranks: list[RankInfo], infos: dict[int, dict]) -> dict[int, int]:
        """{rank: CPU threads} where it differs from the cluster's own share of the cores."""
        return {}

    def store(self) -> tuple[dict[str, Any], str | None]:
        """Where the ranks meet (a file in the private folder), and the interface they use."""
        store = {"kind": "file", "path": str(self.cluster.dir / f"store-{self.cluster.generation}")}
        return store, loopback_interface([name for _, name in socket.if_nameindex()])

    def end_engines(self, grace: float, wait: bool) -> None:
        """SIGTERM the engines, SIGKILL those alive after grace seconds."""
        procs = []
        for r in self.cluster.ranks:
            if r.remote:  # on another host: ended with its job (SlurmLauncher)
                continue
            try:
                procs.append(psutil.Process(r.pid))
            except psutil.Error:
                pass
        end_processes(procs, grace_s=grace)

    def after_restart(self) -> None:
        """Called once the new engines run and before the new group forms."""

    def stop(self) -> None:
        """Release what the launcher itself holds."""

    def signal(self, ranks: list[RankInfo], number: int) -> None:
        """Send a signal to the ranks' engines."""
        for r in ranks:
            try:
                os.kill(r.pid, number)
            except ProcessLookupError:  # a dead rank: reported by the next cell
                pass

    def stack_sender(self, rank: RankInfo) -> Callable[[int, int], None] | None:
        """How to signal a rank on another host for its stack (None: signal it here)."""
        return None

    def describe(self) -> str:
        """A few words for make check, after the cluster's size ('' for the default)."""
        hosts = sorted({r.host for r in self.cluster.ranks})
        return f", launcher {self.name} on {', '.join(hosts)}"
