"""Learners kept apart on a shared machine: a local cluster's ranks listen only inside a
network namespace of their own, so another user of the machine cannot reach them.

Tried as another user would (uid 65534, nobody, through setpriv): every TCP port the ranks
listen on (gloo's listeners among them), connected to from the machine's own network, and the
cluster's private folder and the controller's sockets. Before the isolation (COURSE_ISOLATE=0)
the same probe reaches the ranks' ports, which shows that it can. Needs root (to run the
probe as another user) and Linux's namespaces; elsewhere it skips with one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from system import listening, need, net_namespace

from helpers.cluster import start_cluster

OTHER_USER = 65534  # nobody: another user of the machine, with no right on the learner's files
PROBE = r"""
import json, os, signal, socket, sys
ports, folder, pids = json.loads(sys.argv[1])
found = {"uid": os.getuid(), "connected": [], "refused": [], "folder": None, "signal": []}
for port in ports:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        found["connected"].append(port)
    except OSError as e:
        found["refused"].append([port, type(e).__name__])
    finally:
        s.close()
try:
    os.listdir(folder)
    found["folder"] = "listed"
except OSError as e:
    found["folder"] = type(e).__name__
for pid in pids:
    try:
        os.kill(pid, 0)
        found["signal"].append([pid, "allowed"])
    except OSError as e:
        found["signal"].append([pid, type(e).__name__])
print(json.dumps(found))
"""


def _listening(pids: list[int]) -> list[int]:
    """The TCP ports the processes listen on, read in their own network namespace."""
    return sorted({port for _, _, port in listening(pids)})


def _probe(cluster) -> dict:
    """What another user can do to the cluster's ranks, from this machine's own network."""
    pids = [r.pid for r in cluster.ranks]
    ports = _listening(pids)
    assert ports, "the ranks listen on no TCP port: nothing to probe"
    done = subprocess.run(
        ["setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups",
         sys.executable, "-c", PROBE, json.dumps([ports, str(cluster.dir), pids])],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["uid"] == OTHER_USER
    return dict(found, ports=ports)


@pytest.fixture
def as_root():
    need(os.geteuid() == 0 and shutil.which("setpriv") and shutil.which("unshare")
         and sys.platform.startswith("linux"),
         "probing as another user needs root, setpriv and unshare (Linux)")


def test_another_user_cannot_reach_the_ranks(as_root, monkeypatch, capsys):
    monkeypatch.delenv("COURSE_ISOLATE", raising=False)
    cluster = start_cluster(n=2, backend="gloo", activate=False)
    try:
        assert "network namespace of their own" in cluster.launcher.describe()
        here = net_namespace(os.getpid())
        assert {net_namespace(r.pid) for r in cluster.ranks} != {here}, (
            "the ranks share this machine's network namespace")
        cluster.px("t = torch.ones(1, device=device); dist.all_reduce(t)")  # the group works
        found = _probe(cluster)
    finally:
        cluster.stop()
    assert not found["connected"], f"another user connected to the ranks' ports: {found}"
    assert found["folder"] == "PermissionError", found
    assert all(how == "PermissionError" for _, how in found["signal"]), found
    with capsys.disabled():
        print(f"\nisolated: {len(found['ports'])} listening ports of 2 ranks, "
              f"{len(found['refused'])} refused to another user")


def test_without_isolation_the_same_probe_reaches_the_ranks(as_root, monkeypatch, capsys):
    """The probe above is not blind: with COURSE_ISOLATE=0 the ranks share the machine's
    network, and another user connects to their listeners (gloo's own: it accepts anyone)."""
    monkeypatch.setenv("COURSE_ISOLATE", "0")
    cluster = start_cluster(n=2, backend="gloo", activate=False)
    try:
        assert "not isolated (COURSE_ISOLATE=0)" in cluster.launcher.describe()
        cluster.px("t = torch.ones(1, device=device); dist.all_reduce(t)")
        found = _probe(cluster)
        cluster.px("t = torch.ones(1, device=device); dist.all_reduce(t)")  # still works
    finally:
        cluster.stop()
    assert found["connected"], f"another user reached none of the ranks' ports: {found}"
    with capsys.disabled():
        print(f"\nnot isolated: another user connected to {len(found['connected'])} of "
              f"{len(found['ports'])} listening ports of 2 ranks")
