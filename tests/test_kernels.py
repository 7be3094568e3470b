"""Clusters driven from real Jupyter kernels, as a learner's notebooks drive them.

Two kernels (started like JupyterLab starts them, through jupyter_client) each run a 2-rank
cluster at the same time. One is interrupted in the middle of stuck %%px cells; the other is
killed with SIGKILL, and its engines and controller must end by themselves, within seconds,
while the first kernel's cluster keeps working.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from kernel import Kernel

from helpers.cluster.watchdog import course_processes

START = """
from helpers import start_cluster
cluster = start_cluster(n=2, timeout={timeout})
print(cluster.dir)
"""


@pytest.fixture(scope="module")
def kernels():
    """Kernels 'a' and 'b', each with its own 2-rank cluster, started at the same time.

    IPP_NONINTERACTIVE is unset in them, as in JupyterLab (`make lab`).
    """
    with ThreadPoolExecutor(2) as pool:
        started = list(pool.map(lambda _: Kernel({"IPP_NONINTERACTIVE": ""}), range(2)))
        cells = [k.submit(START.format(timeout=3)) for k in started]
        dirs = list(pool.map(lambda kc: kc[0].wait(kc[1], 90), zip(started, cells)))
    for k, (status, out) in zip(started, dirs):
        assert status == "ok", out
        k.dir = out.strip()
    yield dict(zip("ab", started))
    for k in started:
        k.close()


def interrupt_after(kernel: Kernel, code: str, delay: float = 0.0,
                    began: Sequence[Path] = ()) -> tuple[float, str, str]:
    """Run code, press 'interrupt' once every file of `began` exists (the ranks write them
    when they have begun the cell) and `delay` s after the kernel began it; return seconds
    until the cell returned (printed, not judged: a loaded machine may take its time), its
    status and outputs."""
    msg_id = kernel.submit(code)
    kernel.wait_busy(msg_id, timeout=60)
    deadline = time.monotonic() + 60
    while not all(path.exists() for path in began):
        assert time.monotonic() < deadline, f"the ranks did not begin the cell: no {began}"
        time.sleep(0.01)
    time.sleep(delay)
    pressed = time.monotonic()
    kernel.interrupt()
    status, outputs = kernel.wait(msg_id, timeout=60)
    return time.monotonic() - pressed, status, outputs


def test_interrupting_a_stuck_px_cell_reaches_the_engines(kernels):
    """The cells sleep or wait longer than the test's wait for them (60 s): one that ends with
    the report ended by the interrupt."""
    b = kernels["b"]
    began = [Path(b.dir) / f"began-{rank}" for rank in range(2)]
    seconds, status, outputs = interrupt_after(b, """%%px
import os, time
try:
    open(os.path.join(os.environ["COURSE_CLUSTER_DIR"], f"began-{rank}"), "w").close()
    time.sleep(600)
except KeyboardInterrupt:
    interrupted = True
    raise
""", began=began)
    print(f"sleeping cell returned {seconds:.2f} s after the interrupt")
    assert status == "error" and "Interrupted: rank(s) [0, 1] stopped (KeyboardInterrupt)" \
        in outputs, outputs
    assert b.run("print(cluster.view['interrupted'])").strip() == "[True, True]"
    # stuck inside a collective: the cell returns at once, the engines when the wait times out
    # (a shorter delay would save nothing: the next cell waits for that timeout, counted from
    # the recv's start)
    seconds, status, outputs = interrupt_after(
        b, "%%px\ngot = torch.zeros(1)\ndist.recv(got, src=(rank + 1) % world_size)", delay=1.0)
    print(f"cell stuck in recv returned {seconds:.2f} s after the interrupt")
    assert status == "error" and "Interrupted: rank(s) [0, 1] are still running" in outputs, \
        outputs  # Ctrl-C cannot reach a wait inside the backend
    b.run("cluster.form_group()\n"
          "cluster.px('t = torch.ones(1); dist.all_reduce(t); assert t.item() == world_size')")


def test_two_kernels_do_not_interfere_and_a_killed_one_takes_only_its_own_cluster(kernels):
    a, b = kernels["a"], kernels["b"]
    assert a.dir != b.dir
    ours = {k: {p.pid for p in course_processes(k.dir)} for k in (a, b)}
    assert len(ours[a]) >= 5 and len(ours[b]) >= 5 and not ours[a] & ours[b], ours
    # both clusters run collectives at the same time, each with its own numbers
    loop = """%%px
for _ in range(200):
    t = torch.tensor([{scale} * (rank + 1.0)])
    dist.all_reduce(t)
    assert t.item() == {scale} * 3, f"rank {{rank}}: got {{t.item()}}"
"""
    ids = [k.submit(loop.format(scale=s)) for k, s in ((a, 1), (b, 10))]
    for k, msg_id in zip((a, b), ids):
        assert k.wait(msg_id, 60) == ("ok", "")
    # SIGKILL kernel a: its guard ends its cluster; b's processes and cluster are untouched
    os.kill(a.pid, signal.SIGKILL)
    killed = time.monotonic()
    while (course_processes(a.dir) or os.path.exists(a.dir)) and time.monotonic() - killed < 15:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    print(f"kernel a's cluster gone {gone_after:.1f} s after SIGKILL")
    assert not course_processes(a.dir), "engines or controller outlived their kernel by 15 s"
    assert not os.path.exists(a.dir)
    assert all(psutil.pid_exists(p) for p in ours[b])
    assert b.wait(b.submit(loop.format(scale=10)), 60) == ("ok", "")
