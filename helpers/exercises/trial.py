"""Run a learner's function on the ranks twice, at two world sizes, and record what it called.

Introduced in notebook 00, behind every exercise checker of ``helpers.checks``. An answer that
is right only at the world size it was tried at (a hard-coded 4, a sum that happens to match)
is caught by running the same function again on a group of one rank fewer (and a third time on
rank 0 alone, where the exercise's text promises one rank: ``Exercise.alone``). The runs go
through groups of their own, with a short timeout, so an answer that deadlocks fails within
seconds and leaves the notebook's process group untouched.

The learner's code reads ``rank``, ``world_size`` and ``dist`` from the engine's namespace; in
a run on a group, those names are rebound for the learner's functions (and the functions they
call): ``rank`` and ``world_size`` are the group's, and ``dist`` is ``GroupDist``, which sends
every call to the group and reads every peer (``dst``, ``src``, ``peer``) as a group rank.
The course's call record (``helpers.calls.trace``) sees each call, so a checker can also judge
how a value was produced (point-to-point only, one collective, no communication at all...).
"""

from __future__ import annotations

import gc
import inspect
import os
import threading
import types
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..cluster.px import to_cpu
from ..text import first_line
from . import state

PEERS = {"dst": "group_dst", "src": "group_src"}
RETURNS_A_PEER = ("recv",)


class GroupDist:
    """torch.distributed for code that must run on one group: every call goes to the group,
    and ranks (ranks, peers, roots) are the group's own, 0..size-1."""

    def __init__(self, group: Any):
        import torch.distributed as dist

        self._dist, self._group = dist, group

    def _ours(self, group: Any) -> Any:
        """The group a call names: none, or the whole world, means the trial's group."""
        return self._group if group is None or group is self._dist.group.WORLD else group

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._dist, name)
        if not callable(real) or isinstance(real, type) or name in ("batch_isend_irecv",):
            return real
        try:
            parameters = inspect.signature(real).parameters
        except (TypeError, ValueError):
            return real
        if "group" not in parameters:
            return real

        def on_group(*args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(getattr(self._dist, name)).bind_partial(*args, **kwargs)
            arguments = dict(bound.arguments)
            arguments["group"] = self._ours(arguments.get("group"))
            for peer, group_peer in PEERS.items():
                if arguments.get(peer) is not None and group_peer in parameters:
                    arguments[group_peer] = arguments.pop(peer)
            result = getattr(self._dist, name)(**arguments)
            if name in RETURNS_A_PEER and isinstance(result, int) and result >= 0:
                return self._dist.get_group_rank(self._group, result)
            return result

        on_group.__name__ = name
        on_group.real_name = name  # for P2POp, which checks its op by identity
        return on_group

    def P2POp(self, op: Any, tensor: Any, peer: int | None = None, group: Any = None,
              tag: int = 0) -> Any:
        """dist.P2POp on the group, with peer read as a group rank."""
        real_op = getattr(self._dist, getattr(op, "real_name", getattr(op, "__name__", "")))
        on = self._ours(group)
        size = self._dist.get_world_size(on)
        if peer is not None and not 0 <= peer < size:  # as helpers.calls.trace says it
            side = "to" if "send" in real_op.__name__ else "from"
            raise ValueError(f"rank {self._dist.get_rank(on)}: {real_op.__name__} {side} rank "
                             f"{peer}, which is not a rank of the group (its ranks are "
                             f"0..{size - 1}): check how the peer is computed")
        return self._dist.P2POp(real_op, tensor, group=on, tag=tag, group_peer=peer)

    def get_rank(self, group: Any = None) -> int:
        return self._dist.get_rank(self._ours(group))

    def get_world_size(self, group: Any = None) -> int:
        return self._dist.get_world_size(self._ours(group))


class SaltedHash:
    """hash() as the learner's code sees it during a check: for str and bytes, salted with the
    rank. Python salts those hashes per process (PYTHONHASHSEED): ranks started apart (mpiexec,
    Slurm, torchrun) hash equal data differently, while engines forked from one process, as
    the course's local ones are, share the salt and would hide it. ``used`` notes the salting."""

    def __init__(self, rank: int) -> None:
        self.salt, self.used = f"rank {rank}", False

    def __call__(self, value: Any) -> int:
        if isinstance(value, str | bytes | bytearray | memoryview):
            self.used = True
            return hash((self.salt, bytes(value) if not isinstance(value, str) else value))
        if isinstance(value, tuple):
            return hash(tuple(self(item) for item in value))
        return hash(value)


def rebound(namespace: dict[str, Any], names: dict[str, Any]) -> dict[str, Any]:
    """A copy of the namespace with names replaced, in which every function defined in it (the
    learner's) is rebound to the copy, so that it and its helpers all see the new names."""
    copy = dict(namespace)
    copy.update(names)
    for key, value in namespace.items():
        if key not in names:
            copy[key] = _rebind(value, namespace, copy)
    return copy


def _rebind(fn: Any, namespace: dict[str, Any], copy: dict[str, Any], depth: int = 0) -> Any:
    """fn, reading its names from copy if it is the learner's (defined in namespace), and so
    is a wrapper whose closure holds one: a decorator's, such as @torch.no_grad()'s."""
    if not isinstance(fn, types.FunctionType) or depth > 3:
        return fn
    closure = fn.__closure__
    if closure:
        cells = []
        for cell in closure:
            try:
                inner = cell.cell_contents
            except ValueError:  # a cell not filled yet
                cells.append(cell)
                continue
            new = _rebind(inner, namespace, copy, depth + 1)
            cells.append(cell if new is inner else types.CellType(new))
        closure = tuple(cells)
    mine = fn.__globals__ is namespace
    if not mine and closure == fn.__closure__:
        return fn
    new = types.FunctionType(fn.__code__, copy if mine else fn.__globals__, fn.__name__,
                             fn.__defaults__, closure)
    new.__kwdefaults__, new.__dict__ = fn.__kwdefaults__, dict(fn.__dict__)
    return new


def _group(ranks: list[int], seconds: float, backend: str | None = None) -> Any:
    """A group with a short timeout; NCCL parts wait and raise instead of ending the process."""
    import torch.distributed as dist

    os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"  # read when the group is made (notebook 06)
    try:
        return dist.new_group(ranks, timeout=timedelta(seconds=seconds), backend=backend)
    finally:
        del os.environ["TORCH_NCCL_BLOCKING_WAIT"]


def _attempt(namespace: dict[str, Any], exercise: Any, seed: int, group: Any,
             device: Any) -> dict[str, Any]:
    """Call the learner's function once on the group; its value or error, and its calls."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from ..calls import trace as calltrace
    from ..calls import works

    rank, size = dist.get_rank(group), dist.get_world_size(group)
    salted = SaltedHash(dist.get_rank())
    world = rebound(namespace, {"dist": GroupDist(group), "rank": rank, "world_size": size,
                                "device": device, "hash": salted})
    for stale in exercise.extra.get("lesson_names", ()):  # the lesson's own globals, right
        world.pop(stale, None)  # only at the full size: a clear NameError, not a wrong peer
    outcome: dict[str, Any] = {"rank": rank, "size": size, "value": None, "error": None,
                               "observed": None}
    with torch.random.fork_rng(devices=[]):  # the inputs leave the learner's generator alone
        args = exercise.make_args(rank, size, device, group, seed)
    names = _parameter_names(world.get(exercise.name))
    before, inputs = state.snapshot(), state.inputs(args, names, exercise.writes)
    bookmark = calltrace.mark()
    # what the learner's code calls without naming a group (DistributedDataParallel, for one)
    # takes the default group: for the time of the call, that is the trial's group, so that a
    # run on one rank fewer never waits on the default group for a rank that is not there
    default = c10d._get_default_group()
    c10d._update_default_pg(group)
    works.watch_works(world, through=(globals(),))  # the learner's own calls: were they waited?
    if torch.device(device).type == "cpu":  # on GPU ranks such a tensor shows by itself
        works.watch_factories(world)
    try:
        returned = world[exercise.name](*args)
        works.watch_works(None)
        outcome["host_returned"] = works.host_made(returned)  # made with no device=
        works.watch_factories(None)
        outcome["value"] = to_cpu(exercise.collect(args, returned))  # a copy, taken now
        _returned[:] = state.returned_copies(returned)
        outcome["observed"] = exercise.observe(args, returned)
    except Exception as e:  # noqa: BLE001 - the learner's error is the checker's verdict
        outcome["error"] = error_text(e)
    finally:  # the copy and its functions refer to each other: break the cycle, which would
        works.watch_works(None)
        works.watch_factories(None)
        c10d._update_default_pg(default)
        world.clear()  # keep the group (its sockets and threads) alive until a garbage collection
    outcome["hashed"] = salted.used
    outcome["side_effects"] = state.changed(before, state.snapshot())
    outcome["inputs"] = state.inputs_changed(inputs, args)
    state.restore(before)  # the check leaves the rank as it found it, whatever the answer did
    group_ranks = tuple(dist.get_process_group_ranks(group))
    recorded = calltrace.since(bookmark)
    outcome["calls"] = [{k: e.get(k) for k in ("op", "kind", "peer", "parts", "shapes", "state",
                                                "async", "waited", "tag", "sent",
                                                "host_made")}
                        for e in recorded if e["group_ranks"] == group_ranks]
    outcome["elsewhere"] = sorted({(e["op"], e["group_ranks"]) for e in recorded
                                   if e["group_ranks"] != group_ranks})  # a group of its own
    return outcome


def _right(judge: Callable[..., str | None] | None, exercise: Any, out: dict[str, Any],
           seed: int, run: str = "full") -> bool:
    """Whether this rank's run is right as far as this rank can tell. Where any rank's is not,
    the verdict is that run's, so the ranks skip the runs after it (a wrong answer's verdict
    comes sooner): the notebook's verdict (core.verdict) judges the runs in order and stops at
    the first with a problem."""
    if out["error"] is not None or any(c.get("waited") is False for c in out["calls"]):
        return False  # (core.unwaited names the second)
    if judge is None:
        return True
    before = state.snapshot()  # an exercise's expected value may seed torch's generator
    try:
        return judge(exercise, out, seed, run) is None
    except Exception:  # noqa: BLE001 - a judgement that fails here is made again in the notebook
        return True
    finally:
        state.restore(before)


def _parameter_names(fn: Any) -> list[str]:
    """The names the learner's function gives its parameters, for messages ([] if unknown)."""
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def error_text(error: BaseException, lines: int = 4, width: int = 400) -> str:
    """The learner's error as one line a learner can act on: its type and the first lines of
    its message (load_state_dict names the missing and unexpected keys on its second line)."""
    shown = [line.strip() for line in str(error).strip().splitlines() if line.strip()][:lines]
    text = " / ".join(shown)
    text = text if len(text) <= width else text[:width - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else first_line(error)


def agree(token: str, what: str, mine: bytes, seconds: float) -> list[bytes]:
    """Every rank's `mine` for this step of this trial, in rank order, through the world's
    store: each rank writes its own key and waits for all of them. A barrier that also carries
    a verdict, without a process group of its own (forming one costs a check more than all
    else: tens of milliseconds of store round trips), and without touching the learner's groups.
    The token, the same on every rank and new for every trial, keeps trials apart."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    store = c10d._get_default_store()
    keys = [f"course-trial/{token}/{what}/{r}" for r in range(dist.get_world_size())]
    store.set(keys[dist.get_rank()], mine)
    store.wait(keys, timedelta(seconds=seconds))
    return store.multi_get(keys)


_returned: list[tuple[Any, Any]] = []  # the tensors the last call returned, with copies


def run(exercise: Any, seed: int, timeout_s: float, token: str,
        judge: Callable[..., str | None] | None = None) -> dict[str, Any]:
    """On every rank: the learner's function run on all ranks, then (if the exercise makes
    sense on one rank fewer, and the runs before were right on every rank) on all ranks but
    the last.
    token: new for every call, the same on every rank (``agree``); judge: the notebook's
    judgement of one rank's run (``core.judged``), with which each rank judges its own."""
    import torch.distributed as dist
    from IPython import get_ipython
    from torch.distributed import distributed_c10d as c10d

    namespace = get_ipython().user_ns
    if not callable(namespace.get(exercise.name)):
        return {"missing": f"{exercise.name} is not defined on this rank: run the cell that "
                           "defines it"}
    device, n, me = namespace["device"], dist.get_world_size(), dist.get_rank()
    verdict_s = 2 * timeout_s + 5  # how long a rank waits for the slowest to finish a run
    everyone = _group(list(range(n)), timeout_s)
    runs = {"full": _attempt(namespace, exercise, seed, everyone, device)}
    kept, _returned[:] = list(_returned), []  # what the first call returned, and its copies
    fine = b"1" if _right(judge, exercise, runs["full"], seed) else b"0"
    agreed = agree(token, "full", fine, verdict_s)  # every rank is done with it, and knows how
    reused = False
    if exercise.again and set(agreed) == {b"1"}:  # the same inputs again: the same answer, in
        runs["again"] = _attempt(namespace, exercise, seed, everyone, device)  # new memory
        reused = state.same_memory(kept, _returned)
        fine = b"1" if _right(judge, exercise, runs["again"], seed, "again") else b"0"
        agreed = agree(token, "again", fine, verdict_s)
    smaller = None
    if n - 1 >= exercise.min_size and set(agreed) == {b"1"}:
        smaller = _group(list(range(n - 1)), timeout_s)  # every rank calls it, the last too
        if me < n - 1:
            runs["smaller"] = _attempt(namespace, exercise, seed + 1, smaller, device)
    single = None  # one rank alone, where the text promises it and the runs above did not
    if exercise.alone and n - 1 > 1 and set(agreed) == {b"1"}:
        single = _group([0], timeout_s)
        if me == 0:
            runs["alone"] = _attempt(namespace, exercise, seed + 1, single, device)
    runs["full"]["overwritten"] = reused or state.returned_overwritten(kept)  # by later calls
    _returned.clear()
    del kept
    # every rank is done with every file the runs used; and the count of groups made so far,
    # which names the next group, agrees again: the learner's code may have made groups in
    # the run on one rank fewer, where the last rank did not run it (new_group would hang)
    made = agree(token, "done", str(c10d._world.group_count).encode(), verdict_s)
    c10d._world.group_count = max(int(count) for count in made)
    if exercise.cleanup is not None:
        exercise.cleanup(me, seed)
    mine = [g for g in (everyone, smaller, single) if g is not None and dist.get_rank(g) >= 0]
    del everyone, smaller, single  # (the last rank is not in `smaller`, only rank 0 in `single`)
    release(mine)
    return runs


_releasing: list[threading.Thread] = []


def release(groups: list[Any]) -> None:
    """Destroy the trial's groups and drop its last references to them: gloo's in a thread.

    A gloo group's destructor waits for its transport's event loop once for every peer, about
    10 ms each, with the GIL released: in a thread, that time overlaps the answer's trip back
    to the notebook and the next check's start. Other backends' groups go here and now.
    """
    import torch.distributed as dist

    later = [g for g in groups if dist.get_backend(g) == "gloo"]  # asked before destroying
    for i in range(len(groups)):  # (no loop variable left holding a group when this returns)
        dist.destroy_process_group(groups[i])
    made = [weakref.ref(g) for g in groups]
    groups.clear()

    def drop() -> None:
        later.clear()
        if any(ref() is not None for ref in made):  # the learner's code kept one in a cycle
            gc.collect()

    settle()  # the previous trial's, if not done yet: at most one release at a time
    thread = threading.Thread(target=drop, name="course-trial-release", daemon=True)
    thread.start()
    _releasing.append(thread)


def settle() -> None:
    """Wait until the groups of every earlier trial on this rank are released."""
    while _releasing:
        _releasing.pop().join()


# ---- files a learner's code opens (notebook 05: only rank 0 may read the checkpoint) ------
_watched: set[str] = set()
_opened: dict[str, int] = {}
_hooked: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watched and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path in _watched:
            _opened[path] = _opened.get(path, 0) + 1


def watch(path: str | os.PathLike) -> None:
    """Count from now on how often this process opens path (an audit hook, set once)."""
    import sys

    if not _hooked:  # an audit hook cannot be removed: add it once per process
        sys.addaudithook(_audit)
        _hooked.append(True)
    path = os.path.abspath(os.fspath(path))
    _watched.add(path)
    _opened[path] = 0


def opened(path: str | os.PathLike) -> int:
    """How often this process opened path since watch(path)."""
    return _opened.get(os.path.abspath(os.fspath(path)), 0)
