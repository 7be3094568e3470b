"""Start, re-form, restart and stop the course's cluster: one torch.distributed rank per engine.

Introduced in notebook 00. ``start_cluster()`` starts an ipyparallel controller and one engine
per rank, forms a process group across the engines and activates ``%px``. How the engines
start is the launcher's business (``helpers.cluster.launchers``): forked from a warm process
on this machine (the default), started by ``mpiexec``, or run as a Slurm job spread over
nodes; ``COURSE_LAUNCHER`` and ``COURSE_NODES`` choose the same without changing a notebook.
Every process the cluster starts, and every Slurm job, is also handed to a guard process
(``helpers.cluster.watchdog``), so the cluster ends with its notebook even when the kernel is
killed.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import ipyparallel as ipp

from ..text import first_line, table
from . import engine, interrupts, magics, px, replies, stacks, watchdog
from .controller import Controller
from .errors import START_ADVICE, ClusterError
from .launchers import Launcher, RankInfo, launcher_class, log_tail
from .topology import (
    device_for,
    local_ranks,
    threads_per_rank,
    usable_cores,
)
from .watchdog import course_processes, end_processes

__all__ = ["Cluster", "ClusterError", "RankInfo"]

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class Cluster:
    """A running course cluster; also a context manager that stops it on exit."""

    current: Cluster | None = None  # the one this kernel runs (start_cluster sets it)

    def __init__(self, world_size: int, backend: str, *, timeout: float, start_timeout: float,
                 cell_timeout: float, launcher: type[Launcher] | str = "local", nodes: int = 1,
                 sbatch: list[str] | None = None):
        self.world_size, self.backend = world_size, backend
        self.nodes, self.sbatch = nodes, list(sbatch or [])
        self.timeout, self.start_timeout, self.cell_timeout = timeout, start_timeout, cell_timeout
        self.threads = threads_per_rank(usable_cores(), world_size // nodes)
        self.ranks: list[RankInfo] = []
        self.view: ipp.DirectView | None = None
        self.generation = 0
        self.starts = 0  # engine start-ups so far (each gets its own log files)
        self._threads: dict[int, int] = {}  # {rank: threads} where the launcher says otherwise
        self._guard: subprocess.Popen | None = None
        self._activate = False
        kind = launcher_class(launcher) if isinstance(launcher, str) else launcher
        self.launcher = kind(self)  # (its checks come first: nothing is made if they fail)
        self.dir, self.socket_dir = kind.make_dir()
        self.controller = Controller(self.dir, self.socket_dir, world_size, start_timeout)

    @property
    def client(self) -> ipp.Client | None:
        """This kernel's client of the controller."""
        return self.controller.client

    @property
    def controller_ip(self) -> str:
        """Where engines reach the controller (loopback, or this machine's address on the
        nodes' network)."""
        return self.launcher.controller_ip

    @property
    def _controller_pids(self) -> list[int]:
        return self.controller.pids

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
        self.launcher.prepare()
        self._start_controller()
        self._start_engines()
        self.form_group()
        return self

    def engine_env(self) -> dict[str, str]:
        """What the engines' environment adds: thread limits, and what the launcher adds."""
        return {"PYTHONUNBUFFERED": "1", **self.launcher.engine_env(),
                **{k: str(self.threads) for k in THREAD_VARIABLES}}

    def engine_argv(self) -> list[str]:
        """Command-line arguments of an engine: this cluster's controller, no nanny process
        (the course signals engines by pid), warnings and errors only in its log."""
        return ["--profile-dir", str(self.dir / "profile"),
                "--cluster-id", self.controller.ipp.cluster_id,
                "--IPEngine.enable_nanny=False", "--log-level=WARN"]

    def tell_guard(self, line: str) -> None:
        """Tell the guard process something (a Slurm job to cancel should the kernel die)."""
        if self._guard and self._guard.poll() is None:
            self._guard.stdin.write(f"{line}\n")
            self._guard.stdin.flush()

    def _start_controller(self) -> None:
        self.controller.start(self.launcher.engine_ip(), self.launcher.controller_launch())

    def _start_engines(self) -> None:
        """Start world_size fresh engines and wait (bounded) until every one has registered."""
        old = set(self.client.ids)
        self.starts += 1
        logs = [self.dir / f"engine-{self.starts}-{i}.log" for i in range(self.world_size)]
        if self.launcher.shared_log:
            logs = logs[:1]  # one mpiexec or one job: one log
        deadline = time.monotonic() + self.start_timeout
        pids = self.launcher.start_engines(logs)
        while len(new := set(self.client.ids) - old) < self.world_size:
            self.launcher.watch_start(logs[0], len(new), deadline)
            dead = [pid for pid in pids if replies.is_dead(pid)]
            if dead or time.monotonic() > deadline:
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
        self._threads = self.launcher.threads(self.ranks, by_id)
        self.view = self.client[[ri.engine_id for ri in self.ranks]]
        self.view.block = True
        if self._activate:
            self._activate_magics()

    def _activate_magics(self) -> None:
        """Register %px/%%px for this cluster's ranks in the running IPython kernel."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.magics_manager.register(magics.CourseMagics(shell, self.view, self))
            interrupts.arm_kernel()

    def _missing_message(self, pids: list[int], logs: list, registered: int,
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
                lines.append(log_tail(log))
        lines.append(START_ADVICE)
        return "\n".join(lines)

    def controller_gone(self) -> bool:
        """True if a process of the controller (the hub or a scheduler) has exited: then no
        message reaches the ranks any more, and restart() starts a new controller."""
        return self.controller.gone()

    def _chosen(self, ranks: list[int] | None) -> list[RankInfo]:
        return self.ranks if ranks is None else [self.ranks[r] for r in ranks]

    def px(self, code: str, ranks: list[int] | None = None, timeout: float | None = None) -> None:
        """Run code on the ranks (all by default) like %%px; raise RankError naming bad ranks."""
        px.run(self.client, self._chosen(ranks), code,
               self.cell_timeout if timeout is None else timeout,
               where=self.where, controller_gone=self.controller_gone,
               signal_ranks=functools.partial(self.signal, "SIGINT"))

    def stacks(self, ranks: list[int] | None = None, native: bool = False) -> dict[int, str]:
        """{rank: its Python stack, every thread}, taken from outside the engine (notebook 06).

        Works while a rank is blocked in a collective or in C++: with py-spy where it can
        attach (native=True adds the C++ frames), else with the engine's faulthandler.
        """
        chosen = self._chosen(ranks)
        here = socket.gethostname()
        found = {r.rank: "process gone" for r in chosen if replies.rank_gone(r, self.client)}
        senders = {}  # ranks on other hosts that the launcher can signal there
        for r in chosen:
            if r.rank in found:
                continue
            if (sender := self.launcher.stack_sender(r)) is not None:
                senders[r.rank] = sender
            elif r.host != here:
                found[r.rank] = f"runs on host {r.host}: take its stack there (py-spy dump " \
                                f"--pid {r.pid})"
        todo = {r.rank: r.pid for r in chosen if r.rank not in found}
        found |= stacks.take_many(todo, self.dir, native=native, senders=senders)
        return dict(sorted(found.items()))

    def where(self, ranks: list[int] | None = None) -> dict[int, str]:
        """{rank: one line saying where its main thread is}, e.g. 'in all_reduce, called from
        train_step (line 3), called from the cell (line 5)'."""
        return {r: text if text == "process gone" or text.startswith(("runs on", "(no stack"))
                else stacks.summary(text) for r, text in self.stacks(ranks).items()}

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the engines of the ranks (all by default), like Ctrl-C in a %%px cell
        (requests still on their way there are dropped first, helpers/cluster/interrupts.py),
        and wait (px.INTERRUPT_WAIT at most) until they have answered what they were running,
        so that the next request reaches free engines (a busy one would drop it)."""
        chosen = self._chosen(ranks)
        interrupts.halt(self.client, chosen, lambda busy: None)
        self.signal("SIGINT", [r.rank for r in chosen])
        if busy := replies.wait_idle(self.client, chosen, px.INTERRUPT_WAIT):
            print(px.still_running(busy, "SIGINT"))

    def signal(self, sig: str | int, ranks: list[int] | None = None) -> None:
        """Send a signal (a name such as 'SIGINT', or a number) to the ranks' engines."""
        self.launcher.signal(self._chosen(ranks), getattr(signal, sig) if isinstance(sig, str)
                             else sig)

    def form_group(self) -> Cluster:
        """(Re-)form the process group on the live engines, with a fresh rendezvous store."""
        if self.controller_gone():
            raise ClusterError(px.CONTROLLER_GONE)
        gone = replies.dead_ranks(self.ranks, self.client)
        if gone:
            raise ClusterError(f"rank(s) {gone} died, so no group can be formed on these engines;"
                               " call cluster.restart() to start fresh engines")
        self.generation += 1
        store, interface = self.launcher.store()
        hosts = [ri.host for ri in self.ranks]
        pending = {
            ri.rank: self.client[ri.engine_id].apply_async(
                engine.join_process_group, ri.rank, self.world_size, ri.local_rank,
                self.backend, ri.device, store, self.timeout,
                self._threads.get(ri.rank, self.threads), interface,
                str(self.dir), hosts.count(ri.host),
            )
            for ri in self.ranks
        }
        self.gather(pending, "form the process group")
        return self

    def restart(self) -> Cluster:
        """Replace every engine with a fresh process, then form the process group again.

        If the controller has died too, it is replaced first (a new controller and client).
        """
        self.launcher.end_engines(grace=0, wait=False)  # their state is thrown away, and a
        if self.controller_gone():  # rank stuck inside a collective would not exit politely
            self.controller.end_remains()
            self._start_controller()
        self._start_engines()  # a Slurm job: the new one starts while the old one ends
        self.launcher.after_restart()
        return self.form_group()

    def gather(self, pending: dict[int, Any], what: str) -> list[Any]:
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
        if Cluster.current is self:
            Cluster.current = None
        live = [r.engine_id for r in self.ranks
                if r.rank not in replies.dead_ranks(self.ranks, self.client)]
        if self.client is not None and live and not self.controller_gone():
            try:
                self.client[live].apply_async(engine.leave_process_group).get(5)
            except Exception:  # noqa: BLE001 - engines may be dead or busy; they are ended below
                pass
        self.launcher.end_engines(grace=1.0, wait=True)
        self.launcher.stop()
        self.controller.stop()
        end_processes(course_processes(str(self.dir)))  # anything that ignored the polite stop
        if self._guard and self._guard.poll() is None:
            self._guard.stdin.write("release\n")
            self._guard.stdin.close()
            self._guard.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self.view = None
        self.ranks = []

    def pids(self) -> list[int]:
        """Pids of every live process this cluster started (controller, engines, nannies)."""
        return sorted(p.pid for p in course_processes(str(self.dir)))

    def table(self) -> str:
        """A text table: rank, local rank, device, engine id and pid of every rank."""
        rows = [("rank", "local_rank", "device", "engine_id", "pid")]
        rows += [(r.rank, r.local_rank, r.device, r.engine_id, r.pid) for r in self.ranks]
        return table(rows, right=range(5))

    def __repr__(self) -> str:
        state = "running" if self.controller.ipp is not None else "stopped"
        inside = (f", a step of Slurm job {self.launcher.job}"
                  if getattr(self.launcher, "job", None) else "")
        return (f"<Cluster {state}: {self.world_size} rank(s), backend {self.backend}, "
                f"devices {sorted({r.device for r in self.ranks})}{inside}>")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
