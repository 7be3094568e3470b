"""helpers.jobs.pinstore: a TCPStore hosted by a pinned process listens on the address given."""

from __future__ import annotations

import socket
import sys
import textwrap

import pytest

from helpers.jobs.launch import run_watched
from helpers.jobs.pinstore import PARAMETERS, listening_socket, pinned_arguments


def test_a_hosting_store_gets_a_socket_bound_to_its_host_and_the_real_port():
    named = pinned_arguments(("127.0.0.1", 0, 2, True), {"use_libuv": True})
    sock = socket.socket(fileno=named["master_listen_fd"])
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
        assert named["port"] == sock.getsockname()[1] != 0
        assert named["world_size"] == 2 and named["use_libuv"] is True
    finally:
        sock.close()


def test_a_client_and_a_store_given_its_own_socket_are_left_alone():
    client = ("127.0.0.1", 1234, 2, False)
    assert pinned_arguments(client, {}) == dict(zip(PARAMETERS, client))
    assert pinned_arguments((), {"host_name": "h", "port": 1, "is_master": True,
                                 "master_listen_fd": 7})["master_listen_fd"] == 7


def test_too_many_arguments_are_refused():
    with pytest.raises(TypeError, match="at most 9 arguments"):
        pinned_arguments(tuple(range(10)), {})


def test_listening_socket_on_a_free_port():
    with listening_socket("127.0.0.1", 0) as sock:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0


PINNED_STORE = textwrap.dedent("""
    import torch.distributed as dist
    import sys
    from helpers.jobs.pinstore import USERS, pin
    pin()
    assert all(sys.modules[name].TCPStore is dist.TCPStore for name in USERS)
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    store.set("k", "v")
    assert store.get("k") == b"v"
    import time; time.sleep(1.0)
    print("store on port", store.port)
""")


def test_a_pinned_process_hosts_its_store_on_loopback_only():
    run = run_watched([sys.executable, "-c", PINNED_STORE], timeout=60, poll_s=0.02)
    assert run.returncode == 0, run.output
    assert run.listening == {"127.0.0.1"}, run.listening


def test_without_arguments_it_says_how_to_run_it():
    run = run_watched([sys.executable, "-m", "helpers.jobs.pinstore"], timeout=30)
    assert run.returncode == 1 and "python -m helpers.jobs.pinstore torchrun ARGS" in run.output
