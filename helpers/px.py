"""The course's ``%%px``: run code on the ranks, wait a bounded time, report failures by rank.

Introduced in notebook 00 (the ``%%px`` magic the cluster activates) and taught in notebooks
05 and 06 (dead ranks, hangs). ``Cluster.px`` (code as a string, from ordinary Python) and
the magic share one path: ``submit`` the code to the ranks, then ``wait_for_ranks``. A cell
can never block forever: the wait ends when every rank has answered, when a rank's process
dies (the others are then stuck or failing because of it), or after the cluster's
``cell_timeout``. The error names the ranks and says what to do.

``pull_cpu`` brings a variable back from every rank, in rank order, as CPU copies.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

import ipyparallel as ipp
import psutil
from ipyparallel import error as ipp_error
from ipyparallel import util as ipp_util
from ipyparallel.client import asyncresult as ipp_asyncresult
from ipyparallel.client.magics import ParallelMagics

from . import interrupts
from .text import first_line

CONTROLLER_GONE = ("the controller is gone (its process exited), so the notebook can reach no "
                   "rank any more. Run cluster.restart(): it starts a new controller and fresh "
                   "engines (variables on the engines are lost), or re-run the setup cell.")
RECOVER = ("Recover with cluster.restart() (fresh engines, new process group; variables on "
           "the engines are lost) or cluster.form_group() (new group, same engines).")


def parse_date(text: Any, _general: Callable[[Any], Any] = ipp_util._parse_date) -> Any:
    """ipyparallel's timestamp parsing, the same results about 50 times faster.

    ipyparallel parses the timestamps of every reply (when a rank started and ended a cell)
    with dateutil's general-purpose parser: about 30 us each, 12 per %%px cell at 4 ranks, in
    the notebook's process, which the ranks' replies wait for. Its timestamps are ISO 8601 with
    a time zone, which datetime.fromisoformat reads; anything else goes to ipyparallel's parser.
    """
    if isinstance(text, str) and ipp_util.ISO8601_PAT.match(text):
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return _general(text)
        if parsed.tzinfo is not None:
            return parsed
    return _general(text)


ipp_util._parse_date = ipp_asyncresult._parse_date = parse_date  # ipyparallel 9.2 (pinned)


class RankError(RuntimeError):
    """Code failed, hung or lost its process on some ranks; the message names every one."""

    def __init__(self, message: str, failed: dict[int, str], dead: list[int], silent: list[int]):
        super().__init__(message)
        self.failed, self.dead, self.silent = failed, dead, silent


def is_dead(pid: int) -> bool:
    """True if the process has exited (a zombie waiting to be reaped counts as exited).

    Cheap: it runs before and during every cell, so it reads one small file at most.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, and someone else's (not one of ours)
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # "pid (name) state ...": Z is a zombie
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:  # exited meanwhile
        return True
    except OSError:  # no /proc (macOS)
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True


def rank_gone(rank: Any, client: Any = None) -> bool:
    """True if the engine of this rank (RankInfo) is gone: its process, on this host; on another
    host (a Slurm node), its registration, which the controller drops when the heart stops."""
    if not getattr(rank, "remote", False):
        return is_dead(rank.pid)
    return client is not None and rank.engine_id not in client.ids


def dead_ranks(ranks: Sequence[Any], client: Any = None) -> list[int]:
    """Ranks (RankInfo) whose engine is gone."""
    return [r.rank for r in ranks if rank_gone(r, client)]


def error_of(future: Any) -> BaseException | None:
    """The error a finished execute/apply message ended with, or None (ipyparallel keeps an
    execute's remote error as the future's result, an apply's as its exception)."""
    if not future.done():
        return None
    if future.exception() is not None:
        return future.exception()
    return future.result() if isinstance(future.result(), BaseException) else None


DROPPED = "did not run it: its engine dropped it"
WHY_DROPPED = ("An engine drops the requests queued behind one that failed or was interrupted "
               "there, as a Jupyter kernel drops the cells queued behind an error: run it again.")


def failures(result: Any, rank_of: dict[int, Any]) -> dict[int, str]:
    """Rank -> first line of its error, for every rank whose part of `result` failed or was
    dropped unrun (DROPPED)."""
    found = {}
    for engine_id, future in zip(result._targets, result._children):
        if isinstance(err := error_of(future), ipp_error.TaskAborted):
            found[rank_of[engine_id].rank] = DROPPED
        elif err is not None:
            found[rank_of[engine_id].rank] = first_line(err)
    return dict(sorted(found.items()))


def busy_ranks(client: Any, ranks: Sequence[Any]) -> list[int]:
    """Ranks (RankInfo) with a request sent by this client that has not been answered yet."""
    waiting = client._outstanding_dict  # engine uuid -> unanswered msg ids
    return [r.rank for r in ranks if waiting.get(client._engines.get(r.engine_id))]


def wait_idle(client: Any, ranks: Sequence[Any], wait: float) -> list[int]:
    """Wait up to `wait` seconds until the ranks have answered every request; those that
    have not (after an interrupt: a rank blocked inside the backend, which Ctrl-C reaches only
    when the call returns). A request sent to a rank still busy with one that fails or was
    interrupted would be dropped there (DROPPED)."""
    deadline = time.monotonic() + wait
    while (busy := busy_ranks(client, ranks)) and time.monotonic() < deadline:
        time.sleep(0.005)
    return busy


def still_running(busy: list[int], sig: str) -> str:
    """What an interrupt left running, and why (wait_idle's answer), in one sentence."""
    if not busy:
        return "every rank has answered."
    return (f"rank(s) {busy} still running after {INTERRUPT_WAIT:g} s ({sig} reaches Python "
            "code, not a collective or recv waiting inside the backend, which they leave at the "
            "group's timeout). The next cell waits behind it there; cluster.where() shows where "
            "they are.")


def describe_failure(failed: dict[int, str], dead: list[int], silent: list[int],
                     timeout: float | None, where: dict[int, str] | None = None) -> str:
    """One readable message for everything that went wrong, rank by rank.

    where: for a silent rank, where its code is (helpers.stacks.summary), if known.
    """
    where = where or {}
    lines = []
    if dead:
        lines.append(f"rank(s) {dead} died: their engine process is gone.")
    if silent and not dead:
        lines.append(f"rank(s) {silent} did not answer within {timeout:g} s "
                     "(a hang: a collective or recv that no other rank matches?).")
    if failed and not dead and not silent:
        lines.append(f"the code failed on rank(s) {list(failed)}:" if any(
            why != DROPPED for why in failed.values()) else f"rank(s) {list(failed)} did not run "
            "the code:")
    for rank in sorted(set(failed) | set(silent) | set(dead)):
        if rank in dead:
            lines.append(f"  rank {rank}: process gone")
        elif rank in failed:
            lines.append(f"  rank {rank}: {failed[rank]}")
        else:
            at = f", {where[rank]}" if rank in where else ""
            lines.append(f"  rank {rank}: still running{at}" + (
                " (waiting for the dead rank until its timeout)" if dead
                else f"; cluster.interrupt([{rank}]) sends it Ctrl-C"))
    if DROPPED in failed.values():
        lines.append(WHY_DROPPED)
    if dead or silent:
        lines.append(RECOVER)
    return "\n".join(lines)


def check_controller(controller_gone: Callable[[], bool] | None, ranks: Sequence[Any]) -> None:
    """RankError naming the dead controller, if it is dead (every rank is then out of reach)."""
    if controller_gone is not None and controller_gone():
        everyone = sorted(r.rank for r in ranks)
        raise RankError(CONTROLLER_GONE, {}, [], everyone)


def submit(client: Any, ranks: Sequence[Any], code: str, silent: bool = True
           ) -> tuple[Any, dict[int, Any]]:
    """Start code on the ranks (RankInfo) without waiting; RankError at once if one is dead.

    silent=False (the magic's choice) shows the value of a cell's last expression, and makes
    an engine drop the requests queued behind a cell that fails, as Jupyter kernels do.
    """
    gone = dead_ranks(ranks, client)
    if gone:
        raise RankError(describe_failure({}, gone, [], None), {}, gone, [])
    rank_of = {r.engine_id: r for r in ranks}
    return client[list(rank_of)].execute(code, silent=silent, block=False), rank_of


def wait_for_ranks(result: Any, rank_of: dict[int, Any], timeout: float,
                   poll: float = 0.05, grace: float = 2.0,
                   where: Callable[[list[int]], dict[int, str]] | None = None,
                   controller_gone: Callable[[], bool] | None = None,
                   pressed: Callable[[], bool] | None = None) -> None:
    """Wait for an execute/apply result on the ranks; raise RankError if a rank died or hung.
    Returns at once, whatever the ranks are doing, once pressed() (the stop button) is true.

    Once a rank is seen dead, the others get `grace` seconds to fail on their own (a
    collective usually notices a lost peer at once) so that their errors can be reported.
    where(ranks) says where each silent rank is stuck (Cluster.where), for the report;
    controller_gone() says whether the controller died (then no answer can come).
    """
    client = result._client
    deadline = time.monotonic() + timeout
    by_msg = dict(zip(result.msg_ids, result._targets))
    first_death = None
    while not result.wait(poll):  # the usual case: every rank answers within the first poll
        if pressed is not None and pressed():
            return
        check_controller(controller_gone, list(rank_of.values()))
        now = time.monotonic()
        dead = [rank_of[e].rank for e in result._targets if rank_gone(rank_of[e], client)]
        if dead and first_death is None:
            first_death = now
        if now > deadline or (first_death and now - first_death > grace):
            break
    pending = [m for m in result.msg_ids if m in client.outstanding]
    if not pending:  # every rank answered: whether one has died since is the next cell's news
        return
    dead = sorted({rank_of[e].rank for e in result._targets if rank_gone(rank_of[e], client)})
    silent = sorted(rank_of[by_msg[m]].rank for m in pending if rank_of[by_msg[m]].rank not in dead)
    if dead or silent:
        failed = {r: msg for r, msg in failures(result, rank_of).items() if r not in dead}
        at = where(silent) if where is not None and silent and not dead else None
        raise RankError(describe_failure(failed, dead, silent, timeout, at), failed, dead, silent)


def run(client: Any, ranks: Sequence[Any], code: str, timeout: float,
        where: Callable[[list[int]], dict[int, str]] | None = None,
        controller_gone: Callable[[], bool] | None = None,
        signal_ranks: Callable[[list[int]], None] | None = None) -> None:
    """Run code on the ranks and wait (bounded); RankError naming every rank that went wrong.
    The stop button stops the ranks (signal_ranks(ranks) sends SIGINT) and raises Interrupted."""
    check_controller(controller_gone, ranks)
    with interrupts.PressTaken() as pressed:
        if pressed():
            raise interrupts.Interrupted("before the code was sent: no rank got it.")
        result, rank_of = submit(client, ranks, code)
        wait_for_ranks(result, rank_of, timeout, where=where, controller_gone=controller_gone,
                       pressed=pressed)
        if pressed():
            raise interrupts.Interrupted(stop(result, rank_of, signal_ranks))
    failed = failures(result, rank_of)
    if failed:
        raise RankError(describe_failure(failed, [], [], timeout), failed, [], [])


def stop(result: Any, rank_of: dict[int, Any], signal_ranks: Callable[[list[int]], None] | None
         ) -> str:
    """After the stop button: stop the ranks still on `result` (interrupts.stop_ranks)."""
    client = result._client
    return interrupts.stop_ranks(
        result, rank_of, signal_ranks or (lambda ranks: None),
        lambda ranks, wait: wait_idle(client, ranks, wait), INTERRUPT_WAIT)


def to_cpu(value: Any) -> Any:
    """A detached CPU copy of a tensor, or of every tensor in a list/tuple (notebook 01)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu()
    if isinstance(value, list | tuple):
        return [to_cpu(v) for v in value]
    return value


def pull_cpu(view: ipp.DirectView, name: str) -> list[Any]:
    """A variable (or expression) from every rank, in rank order, as CPU tensors (notebook 01).

    CPU copies, so that a notebook on a GPU machine never has to open CUDA in the client.
    """
    return view.apply_sync(to_cpu, ipp.Reference(name))


@contextmanager
def streamed_by_rank(result: Any, rank_of: dict[int, Any]) -> Iterator[None]:
    """ipyparallel's live output, each piece labelled with its rank ([stdout:0]) instead of
    its engine id, which changes at every restart. Its labels are fixed when streaming starts.

    In a kernel, ipyparallel shows each rank's stream as one display that it updates. Two of
    its gaps are closed here, so that no rank's output goes missing from the live view:
    output that arrived before streaming began is shown under the rank's own display (not one
    display shared by every such rank, each replacing the last), and when streaming ends every
    rank's display is brought up to date with all the output received (a message that arrived
    while streaming was being set up could otherwise be lost)."""
    engine_ids = result._targets
    labels = [rank_of[e].rank for e in engine_ids]
    original = result._iopub_streaming_output_callback

    def show(label: Any, msg_future: Any, msg: dict[str, Any]) -> None:
        if not msg.get("parent_header"):  # output captured before streaming: name its request
            msg = {**msg, "parent_header": {"msg_id": msg_future.msg_id}}
        original(label, msg_future, msg)

    with ExitStack() as stack:
        result._iopub_streaming_output_callback = show
        result._targets = labels
        try:
            stack.enter_context(result.stream_output())
        finally:
            result._targets = engine_ids
            del result._iopub_streaming_output_callback
        try:
            yield
        finally:
            shell = _ipython()
            if shell is not None and getattr(shell, "kernel", None) is not None:
                for label, msg_future in zip(labels, result._children):
                    for name in ("stdout", "stderr"):
                        if msg_future.output.metadata[name]:  # the whole stream, shown again
                            show(label, msg_future, {"header": {"msg_type": "stream"},
                                                     "content": {"name": name, "text": ""}})


def _ipython() -> Any:
    from IPython import get_ipython

    return get_ipython()


@contextmanager
def labelled_by_rank(result: Any, rank_of: dict[int, Any]) -> Iterator[None]:
    """While a result's outputs are shown, label them with ranks, not engine ids."""
    engine_ids = [md.get("engine_id") for md in result._metadata]
    for md, eid in zip(result._metadata, engine_ids):
        if eid in rank_of:
            md["engine_id"] = rank_of[eid].rank
    try:
        yield
    finally:
        for md, eid in zip(result._metadata, engine_ids):
            md["engine_id"] = eid


def wait_for_output(result: Any, wait: float, pressed: Callable[[], bool]) -> None:
    """Wait up to `wait` seconds for the output of the ranks that have answered, or until
    pressed() (the stop button)."""
    deadline = time.monotonic() + wait
    while not pressed() and not result.wait_for_output(0.05) and time.monotonic() < deadline:
        pass


# seconds a stopped cell waits for the output of the ranks it stopped (they have answered)
STOPPED_OUTPUT_WAIT = 0.5
OUTPUT_WAIT = 5.0  # seconds to wait for the output of ranks that have answered (rarely > 0.1)
# seconds an interrupted cell waits for the ranks to answer, so that the next cell does not
# reach an engine still busy with this one (it would be dropped there, see DROPPED)
INTERRUPT_WAIT = 1.0


class CourseMagics(ParallelMagics):
    """ipyparallel's %px / %%px, with a bounded wait, failures reported by rank, and every
    output labelled with the rank that printed it."""

    def __init__(self, shell: Any, view: Any, cluster: Any):
        super().__init__(shell, view)
        self.cluster = cluster

    def _targeted_ranks(self) -> list[Any]:
        """The ranks (RankInfo) that the view's targets name; RankError for unknown engines."""
        rank_of = {r.engine_id: r for r in self.cluster.ranks}
        targets = self.view.targets
        targets = list(rank_of) if targets in (None, "all") else targets
        targets = [targets] if isinstance(targets, int) else list(targets)
        unknown = [t for t in targets if t not in rank_of]
        if unknown:
            raise RankError(f"engine id(s) {unknown} are not ranks of this cluster; engine ids of "
                            f"ranks 0..{len(rank_of) - 1} are {list(rank_of)} "
                            "(see cluster.ranks)", {}, [], [])
        return [rank_of[t] for t in targets]

    def parallel_execute(self, cell, block=None, groupby="type", save_name=None,
                         stream_output=None, progress_after=None, signal_on_interrupt=None):
        """Run a cell on the targeted ranks; like ipyparallel's, but never waits forever."""
        block = self.view.block if block is None else block
        if not block:
            return super().parallel_execute(cell, block, groupby, save_name, stream_output,
                                            progress_after, signal_on_interrupt)
        stream = self.stream_output if stream_output is None else stream_output
        signal = self.signal_on_interrupt if signal_on_interrupt is None else signal_on_interrupt
        ranks = self._targeted_ranks()
        with interrupts.PressTaken() as pressed:  # the stop button, see helpers/interrupts.py
            if pressed():
                raise interrupts.Interrupted("before the cell was sent: no rank got it.")
            # a dead controller is named by the wait below, once no answer came within its
            # first poll (50 ms): checking its processes before every cell would cost more
            result, rank_of = submit(self.view.client, ranks, cell, silent=False)
            self.last_result = result
            if save_name:
                self.shell.user_ns[save_name] = result
            try:
                with streamed_by_rank(result, rank_of) if stream else ExitStack():
                    wait_for_ranks(result, rank_of, self.cluster.cell_timeout,
                                   where=self.cluster.where, pressed=pressed,
                                   controller_gone=self.cluster.controller_gone)
                    # every rank has answered; its output may still be on the way (once a rank
                    # was interrupted, a second or more): streaming ends when this returns
                    wait_for_output(result, OUTPUT_WAIT, pressed)
                    if pressed():
                        said = stop(result, rank_of, signal and functools.partial(
                            self.cluster.signal, signal))
                        result.wait_for_output(STOPPED_OUTPUT_WAIT)
                        raise interrupts.Interrupted(said)
                    failed = failures(result, rank_of)
                    if DROPPED in failed.values():  # ipyparallel shows it as a success
                        raise RankError(describe_failure(failed, [], [], None), failed, [], [])
                    try:
                        result.get(0)
                    except ipp_error.CompositeError as e:
                        if stream and result._output_ready:
                            raise ipp_error.AlreadyDisplayedError(e) from None
                        raise
            finally:
                if not stream and result.ready():  # a rank still running has nothing to show
                    wait_for_output(result, OUTPUT_WAIT, pressed)
                    with labelled_by_rank(result, rank_of):
                        result.display_outputs(groupby)
