"""Start, re-form, restart and stop the course's cluster: one torch.distributed rank per engine.

Introduced in notebook 00. ``start_cluster()`` starts a local ipyparallel controller and
one engine per rank, forms a process group across the engines and activates ``%px``. The
engines are forked from a process that has already imported torch (``launcher="local"``, the
default), started by ``mpiexec`` (``launcher="mpi"``), or run as a Slurm job spread over
``nodes`` hosts (``launcher="slurm"``); ``COURSE_LAUNCHER`` and ``COURSE_NODES`` choose the same
without changing a notebook. Every process it starts, and every Slurm job, is also handed to a
guard process (``helpers.watchdog``), so the cluster ends with its notebook even when the
kernel is killed.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil

from . import engine, interrupts, px, slurm, stacks, watchdog
from .forkserver import ForkServer, ForkServerError
from .text import first_line, table
from .topology import (
    choose_backend,
    choose_launcher,
    controller_address,
    device_for,
    gpus_per_node,
    local_ranks,
    loopback_interface,
    mpi_arguments,
    own_network,
    require_ranks,
    resolve_nodes,
    resolve_world_size,
    sbatch_extra,
    sbatch_options,
    threads_per_rank,
)
from .watchdog import MARKER, course_processes, end_processes

_current: Cluster | None = None
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# the controller writes its connection files and binds its sockets within a second or two on
# an idle machine; this bounds one that never does (start_timeout is the engines')
CONTROLLER_WAIT = 60.0
SOCKET_PATH_MAX = 107  # bytes in a Unix socket's path (sun_path holds 108, with its NUL)
START_ADVICE = ("The cluster was stopped. Re-run the setup cell; if it fails again, the machine "
                "may be overloaded: try fewer ranks (COURSE_WORLD_SIZE=2) or a larger "
                "start_timeout.")


# the engines' Slurm job (ipyparallel's launcher fills in the braces); srun starts one engine per
# task, on the nodes and in the order Slurm gives
SLURM_TEMPLATE = """#!/bin/sh
#SBATCH --job-name=course-engines
#SBATCH --output={output_file}
{options}
srun {program_and_args}
"""


class ClusterError(RuntimeError):
    """The cluster did not start or did not answer; the message says which ranks and what to do."""


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


def visible_gpus() -> int:
    """Number of CUDA GPUs this process can see (0 on a CPU-only build or machine)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _process(pid: int) -> psutil.Process | None:
    """The process pid, or None if it has exited."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _log_tail(path: str | None, lines: int = 8) -> str:
    """The last lines of an engine or controller log, indented, for error messages."""
    try:
        text = Path(path).read_text(errors="replace").splitlines()[-lines:]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return "    (no log)"
    return "\n".join("    " + line for line in text) or "    (empty log)"


class Cluster:
    """A running course cluster; also a context manager that stops it on exit."""

    def __init__(self, world_size: int, backend: str, *, timeout: float, start_timeout: float,
                 cell_timeout: float, launcher: str = "local", nodes: int = 1,
                 sbatch: list[str] | None = None):
        self.world_size, self.backend, self.launcher = world_size, backend, launcher
        self.nodes, self.sbatch = nodes, list(sbatch or [])
        self.jobs: list[str] = []  # launcher "slurm": the engines' job of each start
        self._ending: list[str] = []  # jobs cancelled, not yet gone from the queue
        self._threads: dict[int, int] = {}  # launcher "slurm": {rank: threads}, from its node
        # where engines reach the controller: loopback, or (Slurm) this machine's address on
        # the nodes' network (a ClusterConfigError before anything is made, if it has none)
        self.controller_ip = "127.0.0.1" if launcher != "slurm" else \
            controller_address(os.environ, _resolved_hostname())
        self.timeout, self.start_timeout, self.cell_timeout = timeout, start_timeout, cell_timeout
        self.threads = threads_per_rank(os.cpu_count() or 1, world_size // nodes)
        self.ranks: list[RankInfo] = []
        self.client: ipp.Client | None = None
        self.view: ipp.DirectView | None = None
        self.generation = 0
        self._ipp: ipp.Cluster | None = None
        self._forkserver: ForkServer | None = None
        self._controller_pids: list[int] = []
        self._mpiexec: list[psutil.Process] = []  # launcher="mpi": the mpiexec of each start
        self._starts = 0  # engine start-ups so far (each gets its own log files)
        self._controllers = 0  # controllers started so far (each gets its own sockets)
        self._guard: subprocess.Popen | None = None
        self._activate = False
        self.dir = Path(tempfile.mkdtemp(prefix="course-cluster-")) if launcher != "slurm" else \
            Path(tempfile.mkdtemp(prefix=".course-cluster-", dir=shared_directory()))
        # the controller's Unix sockets: on this machine's own disk, under a short path (a
        # socket's path holds at most 107 bytes; a Slurm cluster's folder is on the shared one)
        self.socket_dir = self.dir if launcher != "slurm" else \
            Path(tempfile.mkdtemp(prefix="course-sockets-"))

    # ---- lifecycle -------------------------------------------------------------------
    def start(self, activate: bool = True) -> Cluster:
        """Start controller and engines, form the process group, activate %px."""
        self._activate = activate
        folders = dict.fromkeys(map(str, [self.dir, self.socket_dir]))  # the cluster's first
        self._guard = subprocess.Popen(
            [sys.executable, watchdog.__file__, *folders],
            stdin=subprocess.PIPE, text=True, start_new_session=True,
        )
        atexit.register(self.stop)
        if self.launcher == "local":
            self._forkserver = self._new_forkserver()  # its imports overlap the controller's
        self._start_controller()
        self._start_engines()
        self.form_group()
        return self

    def _engine_env(self) -> dict[str, str]:
        """What the engines' environment adds: thread limits and the cluster's tag (not for a
        Slurm job: its engines live on other hosts, where the guard cannot see them; it
        cancels their job instead)."""
        env = {"PYTHONUNBUFFERED": "1"}
        if self.launcher != "slurm":
            env[MARKER] = str(self.dir)
        env.update({k: str(self.threads) for k in THREAD_VARIABLES})
        return env

    def _new_forkserver(self) -> ForkServer:
        """A fork server with the engines' environment."""
        return ForkServer(dict(os.environ, **self._engine_env()), self.dir / "forkserver.log")

    def _start_mpi_engines(self, logs: list[Path]) -> list[int]:
        """Start world_size engines with one mpiexec; the pid of mpiexec (in a list).

        Open MPI's mpiexec listens on every interface it can see, and has no switch to bind
        to one address. So it runs in a network namespace of its own (unshare: root, or a
        user namespace elsewhere), whose only interface is that namespace's loopback; its
        engines reach the controller through Unix sockets in the cluster's directory."""
        mpiexec, unshare, ip = (shutil.which(cmd) for cmd in ("mpiexec", "unshare", "ip"))
        if mpiexec is None:
            raise ClusterError("launcher 'mpi' needs mpiexec on PATH (Debian: apt-get install "
                               "openmpi-bin; on a cluster, load the site's MPI module), or use "
                               "COURSE_LAUNCHER=local")
        if importlib.util.find_spec("mpi4py") is None:
            raise ClusterError("launcher 'mpi' needs mpi4py in the engines' Python (pip install "
                               "-e '.[mpi]', or make install); or use COURSE_LAUNCHER=local")
        if unshare is None or ip is None:
            raise ClusterError("launcher 'mpi' runs mpiexec in a network namespace of its own "
                               "and needs unshare and ip (Debian: util-linux and iproute2); "
                               "or use COURSE_LAUNCHER=local")
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        env = dict(self._engine_env(), OMPI_MCA_btl="self,vader",  # MPI: shared memory
                   # inside the namespace everyone is root: Open MPI must be told it may run
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        namespace = [unshare, *own_network(os.geteuid()), "--kill-child", "sh", "-c",
                     f'{ip} link set lo up && exec "$0" "$@"', mpiexec]
        self._ipp.engine_launcher_class = "mpi"
        set_id = self._ipp.start_engines_sync(
            self.world_size, engine_args=self._engine_argv(), environment=env,
            mpi_cmd=namespace, mpi_args=mpi_arguments(version, as_root=True),
            output_file=str(logs[0]))
        pid = self._ipp.engines[set_id].pid
        self._mpiexec.append(psutil.Process(pid))
        return [pid]

    def _start_slurm_engines(self, logs: list[Path]) -> list[int]:
        """Submit the engines as one Slurm job (ipyparallel's Slurm launcher: sbatch, then srun
        on the nodes); its id goes to self.jobs and to the guard. No local pids: []."""
        self._ipp.engine_launcher_class = "slurm"
        lines = "\n".join(f"#SBATCH {option}" for option in self.sbatch)
        try:
            set_id = self._ipp.start_engines_sync(
                self.world_size, engine_args=self._engine_argv(),
                environment=self._engine_env(), output_file=str(logs[0]),
                batch_template=SLURM_TEMPLATE, namespace={"options": lines},
                batch_file_name=str(self._batch_file()))  # absolute: not in the notebook's folder
        except subprocess.CalledProcessError:
            raise ClusterError(f"sbatch refused the engines' job: {self._sbatch_says()}. "
                               f"Its options were {' '.join(self.sbatch)} (from n=, nodes=, "
                               "sbatch= and COURSE_SBATCH)") from None
        job = self._ipp.engines[set_id].job_id
        self.jobs.append(job)
        self._guard.stdin.write(f"job {job}\n")
        self._guard.stdin.flush()
        return []

    def _batch_file(self) -> Path:
        return self.dir / f"engines-{self._starts}.sbatch"

    def _sbatch_says(self) -> str:
        """What sbatch says of the engines' batch script (run again with --test-only)."""
        if not self._batch_file().exists():
            return "(no batch script was written)"
        done = subprocess.run(["sbatch", "--test-only", str(self._batch_file())],
                              capture_output=True, text=True, timeout=30)
        return " ".join((done.stderr or done.stdout).split()) or "(sbatch said nothing)"

    def _start_controller(self) -> None:
        """Start the ipyparallel controller and connect this kernel's client.

        The client and the engines reach it through Unix sockets in the cluster's directory
        (only this user can open them). Under Slurm it listens for engines on the address the
        nodes share; $COURSE_CONTROLLER_NETNS (make cluster-up's cluster) runs it in that
        network namespace, where that address is."""
        netns = os.environ.get("COURSE_CONTROLLER_NETNS", "").strip() \
            if self.launcher == "slurm" else ""
        launch: dict[str, Any] = {}
        self._controllers += 1  # each controller its own sockets (a dead one leaves its files)
        longest = self._sockets / "client:65535"
        if len(bytes(longest)) > SOCKET_PATH_MAX:
            raise ClusterError(f"the controller's sockets would be at {longest}, longer than "
                               f"the {SOCKET_PATH_MAX} bytes a Unix socket's path may have: "
                               "set TMPDIR to a short folder (e.g. /tmp) and start again.")
        self._sockets.mkdir()
        for old in (self.dir / "profile" / "security").glob("ipcontroller-*.json"):
            old.unlink()  # a dead controller's: the new one's are awaited below
        if netns:
            nsenter = shutil.which("nsenter")
            if nsenter is None or not Path(netns).exists():
                raise ClusterError(f"COURSE_CONTROLLER_NETNS={netns}: needs nsenter and that "
                                   "namespace (is make cluster-up's cluster up?)")
            launch["controller_cmd"] = [nsenter, f"--net={netns}", "--", sys.executable, "-m",
                                        "ipyparallel.controller"]
        self._ipp = ipp.Cluster(
            n=self.world_size, profile_dir=str(self.dir / "profile"), controller_ip="127.0.0.1",
            log_level=logging.ERROR, shutdown_atexit=False,
            # the hub accepts an engine at its first heartbeat, so beat often (every 0.1 s);
            # an engine is declared dead after 100 missed beats (10 s), as with the defaults
            controller_args=["--HeartMonitor.period=100", "--log-level=WARN",
                             "--HeartMonitor.max_heartmonitor_misses=100",
                             *self._engine_transport(), *self._client_transport()],
        )
        self._ipp.start_controller_sync(environment={MARKER: str(self.dir)}, **launch)
        self._link_sockets("client")
        if self.launcher != "slurm":
            self._link_sockets("engine")
        self.client = self._ipp.connect_client_sync()
        hub = psutil.Process(self._ipp.controller.pid)  # the hub, and its schedulers (children)
        self._controller_pids = [hub.pid] + [p.pid for p in hub.children(recursive=True)]

    @property
    def _sockets(self) -> Path:
        """The folder of the current controller's Unix sockets."""
        return self.socket_dir / f"sockets-{self._controllers}"

    def _link_sockets(self, side: str) -> None:
        """ipyparallel's controller binds its Unix sockets as engine-PORT (client-PORT), and
        its engines (clients) connect to engine:PORT; a link under the second name for each
        makes them meet."""
        limit = max(self.start_timeout, CONTROLLER_WAIT)
        deadline = time.monotonic() + limit
        pattern = f"ipcontroller-*-{side}.json"

        def wait_a_moment(what: str) -> None:  # what the controller has not done yet
            if px.is_dead(self._ipp.controller.pid):
                raise ClusterError(f"the controller exited before it had {what}.\n{START_ADVICE}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the controller had not {what} after {limit:g} s."
                                   f"\n{START_ADVICE}")
            time.sleep(0.01)

        while True:  # the controller writes the file in place: wait until it is whole
            try:
                files = list((self.dir / "profile" / "security").glob(pattern))
                info = json.loads(files[0].read_text())
                break
            except (IndexError, ValueError):
                wait_a_moment(f"written a whole {pattern}")
        ports = [v for v in info.values() if isinstance(v, int)]
        ports += [p for v in info.values() if isinstance(v, list) for p in v]
        for port in ports:
            bound, link = self._sockets / f"{side}-{port}", self._sockets / f"{side}:{port}"
            while not bound.exists():
                wait_a_moment(f"opened {bound.name}")
            if not link.is_symlink():
                link.symlink_to(bound.name)

    def _engine_transport(self) -> list[str]:
        """Where engines connect: (launcher 'slurm') TCP on the address of this machine that the
        nodes share; else Unix sockets in the cluster's directory (the 'mpi' launcher's engines
        live in a network namespace of their own, which shares the file system)."""
        if self.launcher == "slurm":
            return [f"--IPController.engine_ip={self.controller_ip}"]
        return ["--IPController.engine_transport=ipc",
                f"--IPController.engine_ip={self._sockets / 'engine'}"]

    def _client_transport(self) -> list[str]:
        """Where this kernel's client (and the hub's own monitor) connect: Unix sockets in the
        cluster's directory, for every launcher (the controller runs on this machine).

        Not TCP ports: ipyparallel picks each port by binding port 0 and letting it go, and a
        child of the controller binds it moments later, by when another process may have taken
        it (two kernels starting clusters at once, or any outgoing connection); the child then
        exits and the cluster is broken from its first cell."""
        return ["--IPController.client_transport=ipc",
                f"--IPController.client_ip={self._sockets / 'client'}",
                "--IPController.monitor_transport=ipc",
                f"--IPController.monitor_ip={self._sockets / 'monitor'}"]

    def controller_gone(self) -> bool:
        """True if a process of the controller (the hub or a scheduler) has exited: then no
        message reaches the ranks any more, and restart() starts a new controller."""
        return any(px.is_dead(pid) for pid in self._controller_pids)

    def _start_engines(self) -> None:
        """Fork world_size fresh engines and wait (bounded) until every one has registered."""
        old = set(self.client.ids)
        self._starts += 1
        logs = [self.dir / f"engine-{self._starts}-{i}.log" for i in range(self.world_size)]
        deadline = time.monotonic() + self.start_timeout
        if self.launcher in ("mpi", "slurm"):
            logs = logs[:1]  # one mpiexec or one job: one log
            start = self._start_mpi_engines if self.launcher == "mpi" else self._start_slurm_engines
            pids = start(logs)
        else:
            if not self._forkserver.alive():
                self._forkserver = self._new_forkserver()
            try:
                pids = self._forkserver.fork(
                    [{"argv": self._engine_argv(), "log": str(log)} for log in logs],
                    self.start_timeout)
            except ForkServerError as e:
                raise ClusterError(
                    f"only 0 of {self.world_size} engines registered within "
                    f"{self.start_timeout:g} s: {e}.\n{START_ADVICE}") from e
        polled = time.monotonic()
        while len(new := set(self.client.ids) - old) < self.world_size:
            dead = [pid for pid in pids if px.is_dead(pid)]
            late = time.monotonic() > deadline
            if self.jobs and (late or time.monotonic() - polled > 1):  # Slurm: how is the job?
                self._check_job(logs[0], len(new), deadline)  # (raises once late)
                polled = time.monotonic()
            if dead or late:
                raise ClusterError(self._missing_message(pids, logs, len(new), dead))
            time.sleep(0.01)
        infos = self.client[sorted(new)].apply_async(engine.describe).get(self.start_timeout)
        self.client[sorted(new)].apply_async(interrupts.arm_engine).get(self.start_timeout)
        by_id = dict(zip(sorted(new), infos))
        order = sorted(new, key=lambda eid: (by_id[eid]["host"], eid))
        lranks = local_ranks([by_id[eid]["host"] for eid in order])
        here = socket.gethostname()
        self.ranks = [
            RankInfo(r, lr, eid, by_id[eid]["pid"], by_id[eid]["nanny_pid"], by_id[eid]["host"],
                     device_for(lr, self.backend), remote=by_id[eid]["host"] != here)
            for r, (eid, lr) in enumerate(zip(order, lranks))
        ]
        if self.launcher == "slurm":  # each node's CPUs, shared by the ranks on it
            hosts = [r.host for r in self.ranks]
            per_host = {h: hosts.count(h) for h in hosts}
            self._threads = {r.rank: threads_per_rank(by_id[r.engine_id]["cpus"], per_host[r.host])
                             for r in self.ranks}
        self.view = self.client[[ri.engine_id for ri in self.ranks]]
        self.view.block = True
        if self._activate:
            self._activate_magics()

    def _activate_magics(self) -> None:
        """Register %px/%%px for this cluster's ranks in the running IPython kernel."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.magics_manager.register(px.CourseMagics(shell, self.view, self))
            interrupts.arm_kernel()

    def _check_job(self, log: Path, registered: int, deadline: float) -> None:
        """Launcher 'slurm', while engines register: a ClusterError (job cancelled) if the job
        has ended, or is still pending or its engines unregistered at the deadline."""
        job = self.jobs[-1]
        state = slurm.job_state(job)
        late = time.monotonic() > deadline
        if not slurm.ended(state) and not late:
            return
        if state is not None and state[0] == "PENDING":
            problem = (f"Slurm job {job} was still pending after {self.start_timeout:g} s "
                       f"(squeue's reason: {state[1]}). It is cancelled. Ask for fewer nodes "
                       "or ranks, another partition (COURSE_SBATCH=--partition=...), or a "
                       "larger start_timeout")
        elif slurm.ended(state):
            problem = (f"Slurm job {job} ended ({state[0] if state else 'gone from squeue'}) "
                       f"after {registered} of {self.world_size} engines registered; its "
                       f"output ({log}) ends:\n{_log_tail(str(log))}")
        else:
            problem = (f"Slurm job {job} runs, but only {registered} of {self.world_size} "
                       f"engines reached the controller at {self.controller_ip} within "
                       f"{self.start_timeout:g} s. It is cancelled. Can the nodes reach this "
                       "address? Set COURSE_CONTROLLER_IP to this machine's address on their "
                       f"network. The job's output ends:\n{_log_tail(str(log))}")
        self._cancel_jobs()
        raise ClusterError(f"{problem}\n{START_ADVICE}")

    def _cancel_jobs(self, wait: bool = True) -> None:
        """scancel every job of this cluster; with wait, also wait until none of their engines
        runs (restart() waits later, while the new job starts)."""
        while self.jobs:
            job = self.jobs.pop()
            slurm.run(["scancel", job])
            self._ending.append(job)
        if wait:
            self._wait_cancelled()

    def _wait_cancelled(self) -> None:
        """Wait until the cancelled jobs have left the queue; then the guard may forget them."""
        while self._ending:
            slurm.wait_ended(self._ending[0])
            job = self._ending.pop(0)
            if self._guard and self._guard.poll() is None:
                self._guard.stdin.write(f"done {job}\n")
                self._guard.stdin.flush()

    def _missing_message(self, pids: list[int], logs: list[Path], registered: int,
                         dead: list[int]) -> str:
        """Say which engine processes did not register, and show the end of their logs."""
        lines = [
            f"only {registered} of {self.world_size} engines registered within "
            f"{self.start_timeout:g} s." if not dead else
            f"{len(dead)} engine process(es) exited while the cluster was starting."
        ]
        for i, (pid, log) in enumerate(zip(pids, logs)):
            if pid in dead or not dead:
                state = "exited" if pid in dead else "running but not registered"
                lines.append(f"  engine process {i} (pid {pid}) {state}; its log ends:")
                lines.append(_log_tail(log))
        lines.append(START_ADVICE)
        return "\n".join(lines)

    def _engine_argv(self) -> list[str]:
        """Command-line arguments of an engine: this cluster's controller, no nanny process
        (the course signals engines by pid), warnings and errors only in its log."""
        return ["--profile-dir", str(self.dir / "profile"), "--cluster-id", self._ipp.cluster_id,
                "--IPEngine.enable_nanny=False", "--log-level=WARN"]

    def px(self, code: str, ranks: list[int] | None = None, timeout: float | None = None) -> None:
        """Run code on the ranks (all by default) like %%px; raise RankError naming bad ranks."""
        chosen = self.ranks if ranks is None else [self.ranks[r] for r in ranks]
        px.run(self.client, chosen, code, self.cell_timeout if timeout is None else timeout,
               where=self.where, controller_gone=self.controller_gone,
               signal_ranks=functools.partial(self.signal, "SIGINT"))

    def stacks(self, ranks: list[int] | None = None, native: bool = False) -> dict[int, str]:
        """{rank: its Python stack, every thread}, taken from outside the engine (notebook 06).

        Works while a rank is blocked in a collective or in C++: with py-spy where it can
        attach (native=True adds the C++ frames), else with the engine's faulthandler.
        """
        chosen = self.ranks if ranks is None else [self.ranks[r] for r in ranks]
        here = socket.gethostname()
        found = {r.rank: "process gone" for r in chosen if px.rank_gone(r, self.client)}
        senders = {}  # ranks of a Slurm job on other hosts: their faulthandler, through Slurm
        for r in chosen:
            if r.rank not in found and r.remote and self.jobs:
                senders[r.rank] = functools.partial(self._signal_remote, r.host)
            elif r.rank not in found and r.host != here:
                found[r.rank] = f"runs on host {r.host}: take its stack there (py-spy dump " \
                                f"--pid {r.pid})"
        todo = {r.rank: r.pid for r in chosen if r.rank not in found}
        found |= stacks.take_many(todo, self.dir, native=native, senders=senders)
        return dict(sorted(found.items()))

    def _signal_remote(self, host: str, pid: int, number: int) -> None:
        slurm.signal_ranks(self.jobs[-1], host, [pid], number)

    def where(self, ranks: list[int] | None = None) -> dict[int, str]:
        """{rank: one line saying where its main thread is}, e.g. 'in all_reduce, called from
        train_step (line 3), called from the cell (line 5)'."""
        return {r: text if text == "process gone" or text.startswith(("runs on", "(no stack"))
                else stacks.summary(text) for r, text in self.stacks(ranks).items()}

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the engines of the ranks (all by default), like Ctrl-C in a %%px cell
        (requests still on their way there are dropped first, helpers/interrupts.py), and wait
        (px.INTERRUPT_WAIT at most) until they have answered what they were running, so that
        the next request reaches free engines (a busy one would drop it)."""
        chosen = self.ranks if ranks is None else [self.ranks[r] for r in ranks]
        # requests not yet begun there are dropped, then SIGINT (helpers/interrupts.py)
        interrupts.halt(self.client, chosen, lambda busy: None)
        self.signal("SIGINT", [r.rank for r in chosen])
        if busy := px.wait_idle(self.client, chosen, px.INTERRUPT_WAIT):
            print(px.still_running(busy, "SIGINT"))

    def signal(self, sig: str | int, ranks: list[int] | None = None) -> None:
        """Send a signal (a name such as 'SIGINT', or a number) to the ranks' engines."""
        chosen = self.ranks if ranks is None else [self.ranks[r] for r in ranks]
        number = getattr(signal, sig) if isinstance(sig, str) else sig
        remote: dict[str, list[int]] = {}
        for r in chosen:
            if r.remote:
                remote.setdefault(r.host, []).append(r.pid)
                continue
            try:
                os.kill(r.pid, number)
            except ProcessLookupError:  # a dead rank: reported by the next cell
                pass
        for host, pids in remote.items():  # ranks on Slurm's nodes: through a job step there
            try:
                slurm.signal_ranks(self.jobs[-1], host, pids, number)
            except slurm.SlurmError as e:
                raise ClusterError(f"could not signal the ranks on {host}: {e}") from None

    def form_group(self) -> Cluster:
        """(Re-)form the process group on the live engines, with a fresh rendezvous store."""
        if self.controller_gone():
            raise ClusterError(px.CONTROLLER_GONE)
        gone = px.dead_ranks(self.ranks, self.client)
        if gone:
            raise ClusterError(f"rank(s) {gone} died, so no group can be formed on these engines;"
                               " call cluster.restart() to start fresh engines")
        self.generation += 1
        store: dict[str, Any] = {"kind": "file", "path": str(self.dir / f"store-{self.generation}")}
        interface: str | None = loopback_interface([name for _, name in socket.if_nameindex()])
        if self.launcher == "slurm":  # other hosts: a TCP store on rank 0's host, where each
            first = self.client[self.ranks[0].engine_id]  # rank finds its own interface
            store = self._gather({0: first.apply_async(engine.open_store, self.controller_ip)},
                                 "open the rendezvous store")[0]
            interface = None
        pending = {
            ri.rank: self.client[ri.engine_id].apply_async(
                engine.join_process_group, ri.rank, self.world_size, ri.local_rank,
                self.backend, ri.device, store, self.timeout,
                self._threads.get(ri.rank, self.threads), interface,
                str(self.dir),
            )
            for ri in self.ranks
        }
        self._gather(pending, "form the process group")
        return self

    def restart(self) -> Cluster:
        """Replace every engine with a fresh process, then form the process group again.

        If the controller has died too, it is replaced first (a new controller and client).
        """
        self._end_engines(grace=0, wait=False)  # their state is thrown away, and a rank stuck
        if self.controller_gone():  # inside a collective would not exit politely anyway
            self._replace_controller()
        self._start_engines()  # a Slurm job: the new one starts while the old one ends
        self._wait_cancelled()
        return self.form_group()

    def _gather(self, pending: dict[int, Any], what: str) -> list[Any]:
        """Results of one call per rank, or a ClusterError naming the ranks that failed."""
        deadline = time.monotonic() + self.timeout + self.start_timeout
        failed = {}
        for rank, ar in pending.items():
            try:
                ar.get(max(0.1, deadline - time.monotonic()))
            except ipp.TimeoutError:
                failed[rank] = f"no answer within {self.timeout + self.start_timeout:g} s"
            except Exception as e:  # noqa: BLE001 - reported to the learner below
                failed[rank] = first_line(e)
        if failed:
            detail = "\n".join(f"  rank {r}: {msg}" for r, msg in sorted(failed.items()))
            raise ClusterError(
                f"could not {what} on rank(s) {sorted(failed)}:\n{detail}\n"
                "Recover with cluster.restart() (fresh engines), or re-run the setup cell."
            )
        return [ar.get() for ar in pending.values()]

    def stop(self) -> None:
        """Leave the process group, stop engines and controller, and wait until they are gone.

        Safe to call on a cluster that started only in part, and more than once.
        """
        atexit.unregister(self.stop)
        global _current
        if _current is self:
            _current = None
        live = [r.engine_id for r in self.ranks
                if r.rank not in px.dead_ranks(self.ranks, self.client)]
        if self.client is not None and live and not self.controller_gone():
            try:
                self.client[live].apply_async(engine.leave_process_group).get(5)
            except Exception:  # noqa: BLE001 - engines may be dead or busy; they are ended below
                pass
        self._end_engines(grace=1.0)
        if self._forkserver is not None:
            self._forkserver.stop()
        if self._ipp is not None:
            try:
                self._ipp.stop_controller_sync()
            except Exception:  # noqa: BLE001 - whatever is still running is ended by pid below
                pass
        if self.client is not None:
            self.client.close()
        end_processes(course_processes(str(self.dir)))  # anything that ignored the polite stop
        if self._guard and self._guard.poll() is None:
            self._guard.stdin.write("release\n")
            self._guard.stdin.close()
            self._guard.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._ipp = self.client = self.view = self._forkserver = None
        self.ranks = []

    # ---- helpers ---------------------------------------------------------------------
    def _replace_controller(self) -> None:
        """End what is left of a dead controller, then start a new one and reconnect."""
        end_processes([p for p in map(_process, self._controller_pids) if p is not None])
        self.client.close()
        self._start_controller()

    def _end_engines(self, grace: float, wait: bool = True) -> None:
        """SIGTERM the engines (they stop cleanly), SIGKILL those alive after grace seconds;
        cancel their Slurm job (wait=False: without waiting until it has left the queue)."""
        procs = []
        for r in self.ranks:
            if r.remote:  # on a Slurm node: ended with its job below
                continue
            try:
                procs.append(psutil.Process(r.pid))
            except psutil.Error:
                pass
        end_processes(procs, grace_s=grace)
        end_processes(self._mpiexec, grace_s=max(grace, 1.0))  # it ends when its engines do
        self._mpiexec = []
        self._cancel_jobs(wait)

    def _wait_gone(self, pids: list[int | None], timeout: float = 10.0) -> None:
        """Wait until the given processes (of this cluster) have exited."""
        procs = []
        for pid in filter(None, pids):
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=timeout)

    def pids(self) -> list[int]:
        """Pids of every live process this cluster started (controller, engines, nannies)."""
        return sorted(p.pid for p in course_processes(str(self.dir)))

    def table(self) -> str:
        """A text table: rank, local rank, device, engine id and pid of every rank."""
        rows = [("rank", "local_rank", "device", "engine_id", "pid")]
        rows += [(r.rank, r.local_rank, r.device, r.engine_id, r.pid) for r in self.ranks]
        return table(rows, right=range(5))

    def __repr__(self) -> str:
        state = "running" if self._ipp is not None else "stopped"
        return (f"<Cluster {state}: {self.world_size} rank(s), backend {self.backend}, "
                f"devices {sorted({r.device for r in self.ranks})}>")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(
    n: int | None = None,
    backend: str | None = None,
    *,
    timeout: float = 30.0,
    start_timeout: float = 60.0,
    cell_timeout: float = 120.0,
    min_ranks: int = 1,
    activate: bool = True,
    launcher: str | None = None,
    nodes: int | None = None,
    sbatch: list[str] | str | None = None,
) -> Cluster:
    """Start the course cluster (replacing one this kernel already runs) and activate %px.

    n: ranks (default $COURSE_WORLD_SIZE, else one per GPU with 2+ GPUs, else 4 CPU ranks).
    backend: 'gloo' or 'nccl' (default $COURSE_BACKEND, else nccl when every rank has a GPU).
    timeout: seconds a collective may wait before it fails (the process group's timeout).
    start_timeout: seconds the engines may take to start and register.
    cell_timeout: seconds a %%px cell may wait for the ranks before it reports who is missing.
    min_ranks: the fewest ranks the notebook's lesson makes sense with (checked before starting).
    launcher: 'local' (engines forked on this machine), 'mpi' (started by mpiexec) or 'slurm'
    (a Slurm job); default $COURSE_LAUNCHER, else 'local'.
    nodes: hosts the Slurm job spreads the ranks over (default $COURSE_NODES, else 1).
    sbatch: extra sbatch options, e.g. ["--partition=gpu", "--time=1:00:00"], after those of
    $COURSE_SBATCH; with --gpus-per-node=K the ranks use nccl when each has a GPU.
    """
    global _current
    if _current is not None:
        _current.stop()
    how = choose_launcher(launcher)
    hosts = resolve_nodes(nodes, how)
    extra = sbatch_extra(sbatch) if how == "slurm" else []
    # under Slurm the GPUs are those the job asks for on each node, not this machine's
    n_gpus = gpus_per_node(extra) * hosts if how == "slurm" else visible_gpus()
    world_size = require_ranks(resolve_world_size(n, n_gpus), min_ranks)
    options = sbatch_options(world_size, hosts, extra) if how == "slurm" else []
    if how == "slurm" and (missing := slurm.missing_commands()):
        raise ClusterError(f"launcher 'slurm' needs {', '.join(missing)} on PATH: run the "
                           "notebook on a machine of the Slurm cluster (a login node), source "
                           ".cluster/env for make cluster-up's cluster, or use "
                           "COURSE_LAUNCHER=local")
    chosen = choose_backend(world_size, n_gpus, backend)
    cluster = Cluster(world_size, chosen, timeout=timeout, start_timeout=start_timeout,
                      cell_timeout=cell_timeout, launcher=how, nodes=hosts, sbatch=options)
    try:
        cluster.start(activate=activate)
    except BaseException:
        cluster.stop()
        raise
    _current = cluster
    return cluster


def shared_directory() -> str:
    """Where a Slurm cluster keeps its files (connection files, logs, the batch script): a
    folder the nodes see too, $COURSE_SHARED_DIR or else the notebook's folder (on a cluster
    a home or project directory, shared with the nodes; /tmp is not)."""
    return os.environ.get("COURSE_SHARED_DIR", "").strip() or os.getcwd()


def _resolved_hostname() -> str | None:
    """The address this machine's name resolves to, or None."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def current_cluster() -> Cluster:
    """The cluster this kernel is running, or a ClusterError saying how to start one."""
    if _current is None:
        raise ClusterError("no cluster is running in this kernel; run the setup cell "
                           "(cluster = start_cluster()) first")
    return _current

