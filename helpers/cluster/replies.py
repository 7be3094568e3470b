"""What the ranks' replies to a request say: which ranks failed, were dropped, died or are busy.

Used by ``%%px`` (``px``) and the stop button (``interrupts``), which both read a request's
replies rank by rank (notebooks 00, 05 and 06). Also the faster timestamp parsing that every
reply goes through.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psutil
from ipyparallel import error as ipp_error
from ipyparallel import util as ipp_util
from ipyparallel.client import asyncresult as ipp_asyncresult

from ..text import first_line


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
