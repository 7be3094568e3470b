"""The stop button (Ctrl-C) during a ``%%px`` cell, safe at any instant of the cell's life.

Taught in notebook 05 (interrupting a hung cell). A press is SIGINT to the notebook's kernel.
Python turns it into a KeyboardInterrupt wherever the process happens to be, and two places
cannot take one safely, so the course takes presses differently there:

- While a ``%%px`` cell (or ``cluster.px``) sends code and waits for the ranks, a press only
  sets a flag (``PressTaken``); the wait notices it within one poll and stops the ranks
  (``stop_ranks``). A KeyboardInterrupt inside the client's own code, while it takes replies off
  its sockets, could otherwise lose replies that had arrived.
- In the kernel and in every engine (``arm_kernel``, ``arm_engine``), a press raises
  KeyboardInterrupt only inside the code of the request being run. One that lands in the
  kernel's own machinery (taking a request in, sending a reply; ipykernel ignores it before a
  request's handler starts and raises it anywhere after) is remembered for that request: its
  code stops as it begins, or, if its code has ended, nothing happens. A KeyboardInterrupt in
  the machinery can otherwise end a request with no reply, and a press just before the handler
  starts is otherwise lost.

Stopping the ranks (``stop_ranks``) first tells the engines to drop the request if it has not
begun there (ipyparallel's abort, on their control channel), waits for them to confirm, and only
then sends SIGINT: a request still on its way when SIGINT arrived would otherwise run to its
end. The report names the ranks that were stopped, never got the cell, or had finished, and the
cell ends with it as its error (``Interrupted``), so that Run All stops there as it does at any
interrupted cell.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from .replies import error_of

ABORT_WAIT = 1.0  # seconds to wait for the engines to confirm they will drop an unstarted request


class Interrupted(KeyboardInterrupt):
    """A stopped %%px cell or cluster.px call; its message says what each rank did. Shown
    without a traceback (the message is the whole story)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead
        return [f"Interrupted: {self}"]


# -- the kernel side ------------------------------------------------------------------------

class PressTaken:
    """While active (a context manager, main thread only), a press sets .pressed instead of
    raising KeyboardInterrupt; afterwards the handler that was there before is back."""

    def __init__(self) -> None:
        self.pressed = False
        self._before: Any = None

    def _take(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True

    def __enter__(self) -> PressTaken:
        if threading.current_thread() is threading.main_thread():
            self._before = signal.signal(signal.SIGINT, self._take)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._before is not None:
            signal.signal(signal.SIGINT, self._before)

    def __call__(self) -> bool:
        return self.pressed


def _current_request(kernel: Any) -> str | None:
    try:
        return kernel.get_parent("shell").get("header", {}).get("msg_id")
    except Exception:  # noqa: BLE001 - a kernel without get_parent: no request to name
        return None


def halt(client: Any, ranks: Sequence[Any], signal_ranks: Callable[[list[int]], None]) -> None:
    """Stop every request this client has sent the ranks (RankInfo): those that have not begun
    on their engine are dropped there (abort, confirmed), then the engines running one get
    signal_ranks(ranks)."""
    waiting = client._outstanding_dict  # engine uuid -> unanswered msg ids
    pending = {m: r for r in ranks for m in waiting.get(client._engines.get(r.engine_id), ())}
    if pending:
        # first make sure an engine the request has not reached yet will drop it ...
        targets = sorted({r.engine_id for r in pending.values()})
        confirm = client.abort(list(pending), targets=targets, block=False)
        deadline = time.monotonic() + ABORT_WAIT
        while not confirm.done() and time.monotonic() < deadline:
            time.sleep(0.002)
    # ... then interrupt the ones running it (SIGINT before the abort could miss it)
    signal_ranks(sorted({r.rank for m, r in pending.items() if m in client.outstanding}))


def stop_ranks(result: Any, rank_of: dict[int, Any], signal_ranks: Callable[[list[int]], None],
               wait_idle: Callable[[Sequence[Any], float], list[int]], wait: float) -> str:
    """Stop what a pressed cell left running on the ranks and say, rank by rank, what happened.

    result: the cell's AsyncResult; rank_of: engine id -> RankInfo; signal_ranks(ranks) sends
    the interrupt signal; wait_idle(ranks, seconds) waits for their answers and returns those
    still busy.
    """
    client = result._client
    pending = {m for m in result.msg_ids if m in client.outstanding}
    ranks = list(rank_of.values())
    halt(client, ranks, signal_ranks)
    busy = wait_idle(ranks, wait)
    return report(result, rank_of, pending, busy)


def report(result: Any, rank_of: dict[int, Any], pending: set[str], busy: list[int]) -> str:
    """One sentence per outcome: stopped, never got it, had finished, failed, still running."""
    from ipyparallel import error as ipp_error


    kinds: dict[str, list[int]] = {}
    for msg_id, engine_id, future in zip(result.msg_ids, result._targets, result._children):
        rank = rank_of[engine_id].rank
        err = error_of(future)
        if rank in busy:
            kind = "busy"
        elif isinstance(err, ipp_error.TaskAborted):
            kind = "dropped"
        elif err is not None and getattr(err, "ename", type(err).__name__) == "KeyboardInterrupt":
            kind = "stopped"
        elif err is not None:
            kind = "failed"
        else:
            kind = "finished" if msg_id not in pending else "finished late"
        kinds.setdefault(kind, []).append(rank)
    words = {
        "stopped": "stopped (KeyboardInterrupt)",
        "dropped": "never got the cell: their engine dropped it before it began",
        "finished": "had finished before the press",
        "finished late": "finished before the interrupt reached them",
        "failed": "failed on their own (run the cell again to see why)",
        "busy": "are still running: the interrupt reaches Python code, not a collective or "
                "recv waiting inside the backend, which they leave at the group's timeout; the "
                "next cell waits behind it there, and cluster.where() shows where they are",
    }
    parts = [f"rank(s) {sorted(ranks)} {words[kind]}" for kind, ranks in
             sorted(kinds.items(), key=lambda kv: list(words).index(kv[0]))]
    return "; ".join(parts) + "."


class CtrlC(KeyboardInterrupt):
    """The KeyboardInterrupt a press raises in a cell's code (named KeyboardInterrupt), shown
    as Python shows one: without the frame of the handler that raised it."""

    def _render_traceback_(self) -> list[str]:
        from IPython import get_ipython

        entries, tb = [], self.__traceback__
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        if len(entries) > 1 and entries[-1].tb_frame.f_code is _Presses.on_sigint.__code__:
            entries[-2].tb_next = None
        shell = get_ipython()
        if shell is None:
            return [f"KeyboardInterrupt{': ' + str(self) if str(self) else ''}"]
        return shell.InteractiveTB.structured_traceback(type(self), self, self.__traceback__)


CtrlC.__name__ = CtrlC.__qualname__ = "KeyboardInterrupt"


# -- presses outside a cell's code: the kernel's and every engine's --------------------------

class _Presses:
    """SIGINT in a Jupyter kernel (the notebook's or an engine's): KeyboardInterrupt inside
    the code of the request it runs; elsewhere (taking a request in, sending its reply, idle)
    the press is remembered for the current request, whose code then stops as it begins."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.user = (kernel.shell.user_ns, kernel.shell.user_global_ns)
        self.pending: str | None = None  # a request a press landed in outside its code

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        while frame is not None:
            if frame.f_globals is self.user[0] or frame.f_globals is self.user[1]:
                raise CtrlC
            frame = frame.f_back
        self.pending = _current_request(self.kernel)

    def _take_pending(self, msg_id: str | None) -> bool:
        hit = self.pending is not None and self.pending == msg_id
        if hit:
            self.pending = None
        return hit

    def wrap_run_code(self, run_code: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapped(code_obj: Any, result: Any = None, *, async_: bool = False) -> Any:
            if self._take_pending(_current_request(self.kernel)):
                code_obj, async_ = STOPPED_AS_IT_BEGAN, False
            return await run_code(code_obj, result, async_=async_)
        return wrapped

    def wrap_do_apply(self, do_apply: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(content: Any, bufs: Any, msg_id: str, reply_metadata: Any) -> Any:
            if self._take_pending(msg_id):
                from ipyparallel.serialize import pack_apply_message

                bufs = pack_apply_message(_stopped_as_it_began, (), {})
            return do_apply(content, bufs, msg_id, reply_metadata)
        return wrapped


STOPPED_AS_IT_BEGAN = compile(
    "from helpers.cluster.interrupts import CtrlC\n"
    "raise CtrlC('the cell was stopped as it began: none of it ran.')",
    "<stopped as it began>", "exec")


def _stopped_as_it_began() -> None:
    raise CtrlC("the request was stopped as it began: none of it ran.")


def _arm(kernel: Any) -> _Presses | None:
    """Take SIGINT in this kernel as _Presses says (once; the main thread only)."""
    if getattr(kernel, "course_presses", None) is not None:
        return kernel.course_presses
    if threading.current_thread() is not threading.main_thread():
        return None
    presses = _Presses(kernel)
    signal.signal(signal.SIGINT, presses.on_sigint)
    # ipykernel swaps in default_int_handler while it handles a request (SIG_IGN otherwise):
    # a KeyboardInterrupt in its own code there can end a request with no reply. Keep ours.
    kernel.pre_handler_hook = kernel.post_handler_hook = lambda: None
    kernel.shell.run_code = presses.wrap_run_code(kernel.shell.run_code)
    if hasattr(kernel, "do_apply"):  # an ipyparallel engine
        kernel.do_apply = presses.wrap_do_apply(kernel.do_apply)
    kernel.course_presses = presses
    return presses


def arm_kernel() -> bool:
    """In the notebook's Jupyter kernel (start_cluster calls it): take SIGINT as _Presses says.
    False outside a kernel."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    return kernel is not None and _arm(kernel) is not None


def arm_engine() -> bool:
    """On each engine at start (the cluster applies it): take SIGINT as _Presses says. False
    outside an ipyparallel engine."""
    from ipyparallel.engine.app import IPEngine

    return IPEngine.initialized() and _arm(IPEngine.instance().kernel) is not None
