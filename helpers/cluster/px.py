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

import time
from collections.abc import Callable, Sequence
from typing import Any

import ipyparallel as ipp

from . import interrupts
from .replies import DROPPED, WHY_DROPPED, dead_ranks, failures, rank_gone, wait_idle

CONTROLLER_GONE = ("the controller is gone (its process exited), so the notebook can reach no "
                   "rank any more. Run cluster.restart(): it starts a new controller and fresh "
                   "engines (variables on the engines are lost), or re-run the setup cell.")
RECOVER = ("Recover with cluster.restart() (fresh engines, new process group; variables on "
           "the engines are lost) or cluster.form_group() (new group, same engines).")


class RankError(RuntimeError):
    """Code failed, hung or lost its process on some ranks; the message names every one."""

    def __init__(self, message: str, failed: dict[int, str], dead: list[int], silent: list[int]):
        super().__init__(message)
        self.failed, self.dead, self.silent = failed, dead, silent


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

    where: for a silent rank, where its code is (helpers.cluster.stacks.summary), if known.
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
    collective usually notices a lost peer at once) so that their errors can be reported;
    the wait ends as soon as every rank still alive has answered.
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
        if dead and all(rank_of[by_msg[m]].rank in dead  # the others have all answered:
                        for m in result.msg_ids if m in client.outstanding):  # no more to wait
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
        return value.detach().to("cpu", copy=True)  # a copy on the CPU too: read now
    if isinstance(value, list | tuple):
        return [to_cpu(v) for v in value]
    return value


def pull_cpu(view: ipp.DirectView, name: str) -> list[Any]:
    """A variable (or expression) from every rank, in rank order, as CPU tensors (notebook 01).

    CPU copies, so that a notebook on a GPU machine never has to open CUDA in the client.
    """
    return view.apply_sync(to_cpu, ipp.Reference(name))


# seconds an interrupted cell waits for the ranks to answer, so that the next cell does not
# reach an engine still busy with this one (it would be dropped there, see DROPPED)
INTERRUPT_WAIT = 1.0
