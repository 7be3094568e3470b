"""The fork server: engines forked from it behave like freshly started processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from helpers.cluster.forkserver import ForkServer, ForkServerError


def test_preloading_never_touches_cuda():
    # every CUDA entry point raises: a preloaded module that queried or opened CUDA fails here,
    # on a machine without GPUs too (forked engines could not use a CUDA context opened before)
    script = textwrap.dedent("""
        import torch
        def boom(*args, **kwargs):
            raise AssertionError("CUDA was touched while preloading")
        for name in ("_lazy_init", "init", "is_available", "device_count", "current_device"):
            setattr(torch.cuda, name, boom)
        from helpers.cluster import forkserver
        forkserver._preload()
        print("clean")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "clean", out.stderr[-2000:]


def test_engines_are_fresh_processes(cluster3):
    cluster3.px("""
import os, signal, numpy
state = {"sid": os.getsid(0), "pid": os.getpid(), "numpy": int(numpy.random.randint(2**31)),
         "torch": torch.initial_seed(),
         "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
         "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
         "bad_fork": torch.cuda._is_in_bad_fork(),
         "tag": os.environ.get("COURSE_CLUSTER_DIR")}
""")
    states = cluster3.view["state"]
    assert [s["pid"] for s in states] == [r.pid for r in cluster3.ranks]
    assert all(s["sid"] == s["pid"] for s in states), "each engine leads its own session"
    assert len({s["numpy"] for s in states}) == 3, "engines share a numpy seed"
    assert len({s["torch"] for s in states}) == 3, "engines share torch's seed (fresh ones do not)"
    assert all(s["sigchld"] for s in states), "subprocess.wait would fail with SIGCHLD ignored"
    assert not any(s["bad_fork"] for s in states)
    assert {s["tag"] for s in states} == {str(cluster3.dir)}, "engines must carry the tag"
    # a subprocess on an engine is waited for normally (SIGCHLD is not ignored there)
    cluster3.px("import subprocess, sys\n"
                "assert subprocess.run([sys.executable, '-c', 'pass']).returncode == 0")


def test_a_fork_server_that_died_is_reported_not_waited_for(tmp_path):
    server = ForkServer(dict(os.environ), tmp_path / "fs.log")
    try:
        assert server.fork([], timeout=60) == []  # ready, and forks on request
        server.proc.kill()
        server.proc.wait(10)
        with pytest.raises(ForkServerError, match=r"exited; its log ends"):
            server.fork([{"argv": [], "log": str(tmp_path / "e.log")}], timeout=60)
    finally:
        server.stop()
    assert not server.alive()
