"""Code that runs inside each engine: describe the process, join or leave the process group.

Introduced in notebook 00. The client calls these functions on the engines with
``apply``; they import what they need themselves, because they run in another process.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

from .topology import backend_for, group_backend, interface_with, usable_cores

_store_socket: socket.socket | None = None  # rank 0 on several hosts: the store's listening socket


def describe() -> dict[str, Any]:
    """Who this engine is: pid, host, the pid of its nanny, and the GPUs it can see."""
    import torch

    info: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "n_gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "cpus": cpus_here(),
        "nanny_pid": None,
    }
    try:  # the nanny relays signals (Ctrl-C in a %%px cell) to this engine
        from ipyparallel.engine.app import IPEngine

        if IPEngine.initialized():
            pipe = getattr(IPEngine.instance(), "nanny_pipe", None)
            info["nanny_pid"] = getattr(pipe, "pid", None)
    except Exception:  # noqa: BLE001 - ipyparallel internals: without them, no nanny pid
        pass
    return info


def cpus_here() -> int:
    """CPUs this engine's host gives it and its fellow ranks: a Slurm job's CPUs on the node
    ($SLURM_CPUS_ON_NODE), else those this process may run on."""
    slurm_cpus = os.environ.get("SLURM_CPUS_ON_NODE", "").strip()
    if slurm_cpus.isdigit() and int(slurm_cpus) > 0:
        return int(slurm_cpus)
    return usable_cores()


def _make_store(store: dict[str, Any], rank: int, world_size: int, timeout: timedelta):
    """A rendezvous store: a file in a private directory on one host, a TCP store on many."""
    import torch.distributed as dist

    if store["kind"] == "file":
        return dist.FileStore(store["path"], world_size)
    if store["kind"] == "tcp":  # rank 0 hosts it on the socket open_store() bound
        global _store_socket
        fd = _store_socket.detach() if rank == 0 and _store_socket is not None else None
        _store_socket = None
        return dist.TCPStore(store["host"], store["port"], world_size, is_master=rank == 0,
                             timeout=timeout, master_listen_fd=fd)
    raise ValueError(f"unknown store kind {store['kind']!r}")


def route_source(address: str) -> str:
    """This host's address on the route to address (the routing table's choice; a UDP socket's
    connect() sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((address, 9))
        return sock.getsockname()[0]


def socket_interface(towards: str) -> str:
    """The interface this rank's backend uses to reach the address towards (rank 0's, or the
    controller's): $COURSE_SOCKET_IFNAME if set, else the one the route to it leaves by."""
    if os.environ.get("COURSE_SOCKET_IFNAME", "").strip():
        return os.environ["COURSE_SOCKET_IFNAME"].strip()
    import psutil

    found = {name: [a.address for a in addrs] for name, addrs in psutil.net_if_addrs().items()}
    return interface_with(route_source(towards), found)


def open_store(towards: str) -> dict[str, Any]:
    """On rank 0 of a group spread over hosts: bind the rendezvous store's socket to this host's
    address on the network shared with towards (the controller's address), not to every
    interface; the store itself starts in join_process_group. Returns where the others find it."""
    from ..jobs.pinstore import listening_socket

    global _store_socket
    if _store_socket is not None:
        _store_socket.close()
    address = route_source(towards)
    _store_socket = listening_socket(address, 0)
    return {"kind": "tcp", "host": address, "port": _store_socket.getsockname()[1]}


def join_process_group(
    rank: int,
    world_size: int,
    local_rank: int,
    backend: str,
    device: str,
    store: dict[str, Any],
    timeout_s: float,
    threads: int,
    interface: str | None,
    stack_dir: str | None = None,
    local_world_size: int = 1,
) -> dict[str, Any]:
    """Form this rank's part of the process group and publish rank, device, ... to %px cells.

    stack_dir: where this engine writes its stack when asked (helpers.cluster.stacks, notebook 06).
    local_world_size: the ranks on this rank's host (torchrun's LOCAL_WORLD_SIZE).
    """
    if store["kind"] == "tcp":  # several hosts: the interface on the way to rank 0's host
        interface = socket_interface(store["host"])
    if interface:  # keep every socket of the backend on this interface (loopback on one host)
        os.environ["GLOO_SOCKET_IFNAME"] = interface
        os.environ["NCCL_SOCKET_IFNAME"] = interface
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    leave_process_group()
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(
        group_backend(backend),
        store=_make_store(store, rank, world_size, timeout),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        # no device_id: a group bound to one GPU refuses tensors on any other, and a rank
        # that drives two GPUs (notebook 04, step 11) needs both; torch.cuda.set_device above
        # makes `device` the rank's GPU for everything else
    )
    from ..calls import trace as calltrace

    calltrace.install()  # a fresh record of this rank's calls for the new group (notebook 06)
    if stack_dir is not None:
        from . import stacks

        stacks.arm(stack_dir)
    lesson_backend = backend_for(dev.type, dist.get_backend())
    _publish(rank=rank, world_size=world_size, local_rank=local_rank,
             local_world_size=local_world_size, device=dev,
             backend=lesson_backend, torch=torch, dist=dist)
    return {"rank": dist.get_rank(), "backend": lesson_backend, "pid": os.getpid()}


def _publish(**names: Any) -> None:
    """Make names visible to the code of %px cells (the engine's interactive namespace)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.user_ns.update(names)


def leave_process_group() -> bool:
    """Destroy this engine's process group if it has one; True if there was one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        return True
    return False


def whereami() -> tuple[int, int, Any]:
    """(rank, world size, device) of this engine's rank, from the process group itself.

    For code sent to the engines by scripts (the benchmarks), which cannot rely on the
    names ``rank`` and ``device`` that %%px cells see.
    """
    import torch
    import torch.distributed as dist

    on_gpu = "nccl" in dist.get_backend()  # 'cpu:gloo,cuda:nccl' on GPU ranks
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device
