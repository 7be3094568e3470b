"""Run code on the ranks with a bounded wait, and report failures by rank, not by engine.

Introduced in notebook 00 (the ``%%px`` magic the cluster activates) and taught in notebooks
05 and 06 (dead ranks, hangs). A cell can never block forever: the wait ends when every rank
has answered, when a rank's process dies (the others are then stuck or failing because of
it), or after the cluster's ``cell_timeout``. The error names the ranks and says what to do.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import psutil
from ipyparallel import error as ipp_error
from ipyparallel.client.magics import ParallelMagics

RECOVER = ("Recover with cluster.restart() (fresh engines, new process group; variables on "
           "the engines are lost) or cluster.form_group() (new group, same engines).")


class RankError(RuntimeError):
    """Code failed, hung or lost its process on some ranks; the message names every one."""

    def __init__(self, message: str, failed: dict[int, str], dead: list[int], silent: list[int]):
        super().__init__(message)
        self.failed, self.dead, self.silent = failed, dead, silent


def is_dead(pid: int) -> bool:
    """True if the process has exited (a zombie waiting to be reaped counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def dead_ranks(ranks: Sequence[Any]) -> list[int]:
    """Ranks (RankInfo) whose engine process is gone."""
    return [r.rank for r in ranks if is_dead(r.pid)]


def error_of(future: Any) -> BaseException | None:
    """The error a finished execute/apply message ended with, or None (ipyparallel keeps an
    execute's remote error as the future's result, an apply's as its exception)."""
    if not future.done():
        return None
    if future.exception() is not None:
        return future.exception()
    return future.result() if isinstance(future.result(), BaseException) else None


def first_line(err: BaseException) -> str:
    if isinstance(err, ipp_error.RemoteError):
        return f"{err.ename}: {str(err.evalue).strip().splitlines()[0] if err.evalue else ''}"
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"


def describe_failure(failed: dict[int, str], dead: list[int], silent: list[int],
                     timeout: float | None) -> str:
    """One readable message for everything that went wrong, rank by rank."""
    lines = []
    if dead:
        lines.append(f"rank(s) {dead} died: their engine process is gone.")
    if silent and not dead:
        lines.append(f"rank(s) {silent} did not answer within {timeout:g} s "
                     "(a hang: a collective or recv that no other rank matches?).")
    for rank in sorted(set(failed) | set(silent) | set(dead)):
        if rank in dead:
            lines.append(f"  rank {rank}: process gone")
        elif rank in failed:
            lines.append(f"  rank {rank}: {failed[rank]}")
        else:
            lines.append(f"  rank {rank}: still running" + (
                " (waiting for the dead rank until its timeout)" if dead
                else f"; cluster.interrupt([{rank}]) sends it Ctrl-C"))
    if dead or silent:
        lines.append(RECOVER)
    return "\n".join(lines)


def wait_for_ranks(result: Any, rank_of: dict[int, Any], timeout: float,
                   poll: float = 0.05, grace: float = 2.0) -> None:
    """Wait for an execute/apply result on the ranks; raise RankError if a rank died or hung.

    Once a rank is seen dead, the others get `grace` seconds to fail on their own (a
    collective usually notices a lost peer at once) so that their errors can be reported.
    """
    client = result._client
    deadline = time.monotonic() + timeout
    by_msg = dict(zip(result.msg_ids, result._targets))
    first_death = None
    while True:
        now = time.monotonic()
        pending = [m for m in result.msg_ids if m in client.outstanding]
        dead = [rank_of[e].rank for e in result._targets if is_dead(rank_of[e].pid)]
        if dead and first_death is None:
            first_death = now
        if not pending or now > deadline or (first_death and now - first_death > grace):
            break
        result.wait(poll)
    silent = sorted(rank_of[by_msg[m]].rank for m in pending)
    failed = {}
    for engine_id, future in zip(result._targets, result._children):
        rank = rank_of[engine_id].rank
        if rank not in dead and (err := error_of(future)) is not None:
            failed[rank] = first_line(err)
    if dead or silent:
        raise RankError(describe_failure(failed, sorted(set(dead)), silent, timeout),
                        failed, sorted(set(dead)), silent)


class CourseMagics(ParallelMagics):
    """ipyparallel's %px / %%px, with a bounded wait and failures reported by rank."""

    def __init__(self, shell: Any, view: Any, cluster: Any):
        super().__init__(shell, view)
        self.cluster = cluster

    def parallel_execute(self, cell, block=None, groupby="type", save_name=None,
                         stream_output=None, progress_after=None, signal_on_interrupt=None):
        """Run a cell on the targeted ranks; like ipyparallel's, but never waits forever."""
        block = self.view.block if block is None else block
        if not block:
            return super().parallel_execute(cell, block, groupby, save_name, stream_output,
                                            progress_after, signal_on_interrupt)
        stream = self.stream_output if stream_output is None else stream_output
        signal = self.signal_on_interrupt if signal_on_interrupt is None else signal_on_interrupt
        rank_of = {r.engine_id: r for r in self.cluster.ranks}
        targets = self.view.targets
        targets = list(rank_of) if targets in (None, "all") else targets
        targets = [targets] if isinstance(targets, int) else list(targets)
        unknown = [t for t in targets if t not in rank_of]
        if unknown:
            raise RankError(f"engine id(s) {unknown} are not ranks of this cluster; engine ids of "
                            f"ranks 0..{len(rank_of) - 1} are {list(rank_of)} "
                            "(see cluster.ranks)", {}, [], [])
        gone = dead_ranks([rank_of[t] for t in targets])
        if gone:
            raise RankError(describe_failure({}, gone, [], None), {}, gone, [])
        result = self.view.execute(cell, silent=False, block=False, targets=targets)
        self.last_result = result
        if save_name:
            self.shell.user_ns[save_name] = result
        try:
            with result.stream_output() if stream else nullcontext():
                wait_for_ranks(result, rank_of, self.cluster.cell_timeout)
                result.wait_for_output(1)
                try:
                    result.get(0)
                except ipp_error.CompositeError as e:
                    if stream and result._output_ready:
                        raise ipp_error.AlreadyDisplayedError(e) from None
                    raise
        except KeyboardInterrupt:
            print(f"Interrupted: sending {signal} to the ranks' engines", flush=True)
            self.view.client.send_signal(signal, targets=targets, block=True)
        finally:
            if not stream and result.ready():  # a rank still running has nothing to show yet
                result.wait_for_output(1)
                result.display_outputs(groupby)
