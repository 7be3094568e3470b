"""Keep every TCP store a process hosts on the address it was given, not on every interface.

Introduced in notebook 07 (its security box). PyTorch's ``TCPStore`` server listens on all the
interfaces of the machine, whatever host name it is given, and it checks nobody: whoever
reaches the port can read and write its keys. ``TCPStore(master_listen_fd=...)`` accepts a
socket that the caller has bound itself. ``pin()`` makes every store this process hosts do
that, bound to the address the store was given (127.0.0.1 in the course). Run a launcher or
a script pinned with::

    python -m helpers.jobs.pinstore torchrun ARGS...      # torchrun, its agents' stores pinned
    python -m helpers.jobs.pinstore -m MODULE ARGS...     # e.g. -m torch.distributed.launch
    python -m helpers.jobs.pinstore SCRIPT ARGS...        # a script that calls init_process_group

On a cluster, bind to the nodes' private network instead, or keep the port behind a firewall.
"""

from __future__ import annotations

import runpy
import socket
import sys
from typing import Any

# TCPStore's parameters, in order (it is a C++ class: its signature cannot be read)
PARAMETERS = ("host_name", "port", "world_size", "is_master", "timeout", "wait_for_workers",
              "multi_tenant", "master_listen_fd", "use_libuv")
# modules that took the name TCPStore from torch.distributed when they were imported
USERS = ("torch.distributed.rendezvous",
         "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
         "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
         "torch.distributed.checkpoint._async_process_executor")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: any free port) and listening."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def pinned_arguments(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """TCPStore's arguments by name; a hosting store gets a socket bound to its host name."""
    if len(args) > len(PARAMETERS):
        raise TypeError(f"TCPStore takes at most {len(PARAMETERS)} arguments, got {len(args)}")
    named = dict(zip(PARAMETERS, args)) | kwargs
    if named.get("is_master") and named.get("master_listen_fd") is None:
        sock = listening_socket(named["host_name"], named.get("port", 0))
        named["port"] = sock.getsockname()[1]
        named["master_listen_fd"] = sock.detach()  # the store owns the socket from now on
    return named


def pin() -> None:
    """From now on, every TCPStore this process hosts listens only on the address it is given."""
    import importlib

    import torch.distributed as dist

    if getattr(dist.TCPStore, "pinned", False):
        return

    class PinnedTCPStore(dist.TCPStore):
        pinned = True

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(**pinned_arguments(args, kwargs))

    dist.TCPStore = PinnedTCPStore
    for name in USERS:
        importlib.import_module(name).TCPStore = PinnedTCPStore


def main(argv: list[str]) -> None:
    """python -m helpers.jobs.pinstore (torchrun | -m MODULE | SCRIPT) ARGS..."""
    if not argv:
        raise SystemExit("usage:\n" + __doc__.split("::")[1].strip("\n").split("\n\n")[0])
    pin()
    if argv[0] == "torchrun":
        from torch.distributed.run import main as torchrun

        sys.argv = ["torchrun", *argv[1:]]
        torchrun()
    elif argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
