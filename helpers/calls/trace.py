"""A record, on every rank, of the collectives and point-to-point calls it made.

Introduced in notebook 06. ``install()`` runs on each engine when it joins a process group
(``helpers.cluster.engine.join_process_group``). It replaces the communication functions of
``torch.distributed`` (``dist.all_reduce``, ``dist.isend``, ...) with thin wrappers that append
one small entry per call to a bounded deque, then call the original and return what it returns.
An entry says which operation, on which group, with which shapes and dtype, to or from which
peer, and how it ended. Collectives carry their sequence number in the group (the n-th
collective of a group must be the same operation on every rank); a point-to-point call carries
the number of collectives before it. ``fetch(cluster)`` pulls every rank's entries into the
notebook; ``helpers.calls.table`` lines them up.

A point-to-point call whose peer is not a rank of its group (``dst=world_size``, a ring that
forgot its ``% world_size``) is refused with a ValueError that names the rank and the peer: gloo
does not check it, and such a call hangs or crashes the engine.

Calls made inside a recorded call (``batch_isend_irecv`` calling ``isend``, for example) are not
recorded again. Code that captured a function before ``install()`` ran keeps the original.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ..text import first_line
from . import works

COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "all_gather_single", "all_gather_coalesced", "all_gather_object",
    "gather", "gather_object", "scatter", "scatter_object_list", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "broadcast_object_list", "barrier", "monitored_barrier",
)
POINT_TO_POINT = (
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list",
)
SENDS = ("send", "isend", "send_object_list")  # the others in POINT_TO_POINT receive
PEER_ARGS = ("dst", "src", "group_dst", "group_src")

_calls: deque[dict[str, Any]] = deque(maxlen=256)
_counters: dict[str, int] = {}
# each group's label and ranks, held weakly: a destroyed group must be freed with its sockets
# and threads (a check makes three groups; holding them leaked about 20 open files a check)
_groups: weakref.WeakKeyDictionary[Any, tuple[str, tuple[int, ...]]] = weakref.WeakKeyDictionary()
_originals: dict[str, Callable] = {}
_local = threading.local()


def install(maxlen: int = 256) -> None:
    """Wrap torch.distributed's communication functions (once) and start an empty record."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    global _calls
    _calls = deque(maxlen=maxlen)
    _counters.clear()
    _groups.clear()
    for name in COLLECTIVES + POINT_TO_POINT:
        fn = getattr(dist, name, None)
        if fn is None or name in _originals:
            continue
        _originals[name] = fn
        setattr(dist, name, _wrap(name, fn))
        # under both names (torch.distributed re-exports distributed_c10d's functions): a call
        # through either is recorded, and P2POp compares its op with c10d's isend by identity
        if getattr(c10d, name, None) is fn:
            setattr(c10d, name, getattr(dist, name))


def uninstall() -> None:
    """Put the original torch.distributed functions back (the record is kept)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    for name, fn in _originals.items():
        if getattr(c10d, name, None) is getattr(dist, name):
            setattr(c10d, name, fn)
        setattr(dist, name, fn)
    _originals.clear()


def reset() -> None:
    """Forget the entries recorded so far (sequence numbers start again at 0)."""
    _calls.clear()
    _counters.clear()


def mark() -> int:
    """A bookmark in this rank's record: since(mark()) later gives the calls made meanwhile."""
    return _counters.get("*", 0)


def since(bookmark: int) -> list[dict[str, Any]]:
    """This rank's entries recorded since the bookmark, oldest first (copies)."""
    return [dict(e) for e in list(_calls) if e["n"] >= bookmark]


def records() -> list[dict[str, Any]]:
    """This rank's entries, oldest first (copies: safe to send to the notebook)."""
    return [dict(e) for e in list(_calls)]


def overhead_us(calls: int = 2000) -> float:
    """Microseconds the record adds to one call: a recorded do-nothing call minus a bare one.

    The calls made for the measurement are removed from the record afterwards.
    """
    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    import torch

    saved, counters, tensor = list(_calls), dict(_counters), torch.ones(4)
    seconds = []
    for fn in (all_reduce, _wrap("all_reduce", all_reduce)):
        start = time.perf_counter()
        for _ in range(calls):
            fn(tensor)
        seconds.append(time.perf_counter() - start)
    _calls.clear()
    _calls.extend(saved)
    _counters.clear()
    _counters.update(counters)
    return (seconds[1] - seconds[0]) / calls * 1e6


def _wrap(name: str, fn: Callable) -> Callable:
    """A function with fn's signature that records the call, then calls fn."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "inside", False):
            return fn(*args, **kwargs)
        try:
            entry = _entry(name, signature, args, kwargs)
        except Exception:  # noqa: BLE001 - the record must never break the call it records
            entry = None
        if entry is None:
            return fn(*args, **kwargs)
        if problem := entry.pop("problem"):  # refused before gloo: it would hang or crash
            entry.update(state="failed", error=problem, seconds=0.0)
            raise ValueError(problem)
        _local.inside = True
        start = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            entry.update(state="failed", error=first_line(e))
            raise
        finally:
            _local.inside = False
            entry["seconds"] = time.perf_counter() - start
        if entry["state"] == "running":
            entry["state"] = "issued" if entry["async"] else "done"
        if entry["async"]:
            return works.handed_back(result, entry)
        return result

    return recorded


def _entry(name: str, signature: inspect.Signature, args: tuple, kwargs: dict
           ) -> dict[str, Any] | None:
    """Append the record of one call; None if this rank is not in the call's group."""
    try:
        arguments = signature.bind(*args, **kwargs).arguments
    except TypeError:  # a wrong call: let the original raise its own error
        return None
    group = arguments.get("group")
    if name == "batch_isend_irecv" and arguments.get("p2p_op_list"):
        group = arguments["p2p_op_list"][0].group
    label, ranks = _group_info(group)
    if not ranks:
        return None
    kind = "collective" if name in COLLECTIVES else "p2p"
    shapes, dtype = _tensors(name, arguments)
    peer, parts = _peer(arguments, ranks), _parts(arguments.get("p2p_op_list") or ())
    count, n = _counters.get(label, 0), _counters.get("*", 0)
    _counters["*"] = n + 1  # every call this rank recorded: n > 0 first means a full deque
    if kind == "collective":
        _counters[label] = count + 1
    entry = {
        "n": n, "op": name, "kind": kind, "group": label, "group_ranks": ranks, "seq": count,
        "shapes": shapes, "dtype": dtype, "peer": peer, "parts": parts, "tag": arguments.get("tag"),
        "async": bool(arguments.get("async_op")) or name in ("isend", "irecv", "batch_isend_irecv"),
        "state": "running", "error": None, "start": time.time(), "seconds": None,
        "problem": _peer_problem(name, arguments, ranks) if kind == "p2p" else None,
    }
    if works.watching():  # during a check: a copy of what the call sends, for payload rules,
        entry["sent"] = _sent(name, arguments)  # and whether a tensor it carries was made
        carried = ([op.tensor for op in arguments.get("p2p_op_list") or ()]  # with no device
                   if name == "batch_isend_irecv" else list(arguments.values()))
        entry["host_made"] = any(works.host_made(v) for v in carried)
    _calls.append(entry)
    return entry


# the argument that carries what a call sends (a tensor or a list of tensors)
SENT = {"all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor", "all_gather": "tensor",
        "all_gather_into_tensor": "input_tensor", "all_gather_single": "input_tensor",
        "reduce_scatter": "input_list", "reduce_scatter_tensor": "input",
        "reduce_scatter_single": "input", "all_to_all": "input_tensor_list",
        "all_to_all_single": "input", "send": "tensor", "isend": "tensor", "gather": "tensor",
        "scatter": "scatter_list"}


def _sent(name: str, arguments: dict[str, Any]) -> Any:
    """A CPU copy of what the call sends, taken as it is made (None where nothing is known):
    a tensor, or a list of tensors; batch_isend_irecv: the list of its sends' tensors."""
    import torch

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to("cpu", copy=True)
        if isinstance(value, list | tuple) and all(isinstance(v, torch.Tensor) for v in value):
            return [copy(v) for v in value]
        return None

    if name == "batch_isend_irecv":
        return [copy(op.tensor) for op in arguments.get("p2p_op_list") or ()
                if getattr(op.op, "__name__", "") == "isend"]
    return copy(arguments.get(SENT.get(name, "")))


def _group_info(group: Any) -> tuple[str, tuple[int, ...]]:
    """A short label for a process group and its global ranks (empty if this rank is outside)."""
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    if pg is None or isinstance(pg, int):  # not initialised, or this rank is not a member
        return "none", ()
    if pg not in _groups:
        label = "world" if pg is dist.group.WORLD else f"group {getattr(pg, 'group_name', id(pg))}"
        _groups[pg] = (label, tuple(dist.get_process_group_ranks(pg)))
    return _groups[pg]


def _shape(value: Any) -> Any:
    """A tensor's shape as a tuple, a list of tensors as a list of shapes, else None."""
    import torch

    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, list | tuple) and value and isinstance(value[0], torch.Tensor):
        return [tuple(t.shape) for t in value]
    return None


def _tensors(name: str, arguments: dict[str, Any]) -> tuple[tuple, str | None]:
    """The shapes of the tensor arguments, in order, and the dtype of the first tensor."""
    import torch

    values = list(arguments.values())
    if name == "batch_isend_irecv":
        values = [op.tensor for op in arguments.get("p2p_op_list") or ()]
    shapes, dtype = [], None
    for value in values:
        shape = _shape(value)
        if shape is None:
            continue
        shapes.append(shape)
        if dtype is None:
            first = value if isinstance(value, torch.Tensor) else value[0]
            dtype = str(first.dtype).removeprefix("torch.")
    return tuple(shapes), dtype


def _peer(arguments: dict[str, Any], ranks: tuple[int, ...]) -> int | None:
    """The global rank named by src/dst (or group_src/group_dst), if the call names one."""
    for key in PEER_ARGS:
        value = arguments.get(key)
        if value is not None:
            return ranks[value] if key.startswith("group_") and value < len(ranks) else value
    return None


def _peer_problem(name: str, arguments: dict[str, Any], ranks: tuple[int, ...]) -> str | None:
    """Why the call's peer (or a peer in its batch) is not a rank of its group, if it is not."""
    bad = [v for key in PEER_ARGS if (v := arguments.get(key)) is not None
           and not (0 <= v < len(ranks) if key.startswith("group_") else v in ranks)]
    bad += [op.peer for op in arguments.get("p2p_op_list") or () if op.peer not in ranks]
    if not bad:
        return None
    import torch.distributed as dist

    members = f"0..{len(ranks) - 1}" if ranks == tuple(range(len(ranks))) else list(ranks)
    way = "to" if name in SENDS else "with" if name == "batch_isend_irecv" else "from"
    return (f"rank {dist.get_rank()}: {name} {way} rank {bad[0]}, which is not a rank of the "
            f"group (its ranks are {members}): check how the peer is computed")


def _parts(p2p_ops: Any) -> tuple[tuple[str, int, tuple], ...]:
    """(op, global peer, shape) of each operation in a batch_isend_irecv list."""
    return tuple((op.op.__name__, op.peer, tuple(op.tensor.shape)) for op in p2p_ops)


def fetch(cluster: Any, timeout: float = 10.0) -> dict[int, list[dict[str, Any]] | str]:
    """Every rank's record, by rank; a rank that cannot answer gets a string saying why.

    A rank still blocked in a collective answers only when that collective returns (at the
    process group's timeout), so the wait is bounded by `timeout` seconds.
    """
    from ..cluster.replies import dead_ranks

    gone = set(dead_ranks(cluster.ranks, cluster.client))
    pending = {ri.rank: cluster.client[ri.engine_id].apply_async(records)
               for ri in cluster.ranks if ri.rank not in gone}
    deadline = time.monotonic() + timeout
    traces: dict[int, list[dict[str, Any]] | str] = {r: "process gone" for r in gone}
    for rank, result in pending.items():
        try:
            traces[rank] = result.get(max(0.1, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - busy or broken engines are reported, not raised
            traces[rank] = "busy (no answer)" if "TimeoutError" in type(e).__name__ else (
                f"{type(e).__name__}")
    return dict(sorted(traces.items()))
