"""A warm process that engines are forked from, so that a new engine is ready in milliseconds.

Introduced with the cluster of notebook 00 (its setup cell) and used by every restart in
notebooks 05 and 06. An engine that starts from nothing spends about two seconds importing
torch, ipyparallel and IPython, and four of them on two cores take twice that. The fork
server does those imports once; each engine is then a ``fork()`` of it, sharing the imported
modules, and only connects to the controller.

Safety rules, each checked here:
- nothing in this process touches CUDA (importing torch does not; a forked child cannot use a
  CUDA context its parent opened), so engines may use their GPUs;
- it starts no thread of its own, creates no sockets or event loops before forking;
- each child resets what a fresh process would have: default signal handlers, its own
  log file as stdout/stderr, new numpy and torch seeds, and its own session (a Ctrl-C meant for the
  notebook's kernel never reaches the engines; the course forwards it explicitly).

Protocol (one JSON object per line): the server prints ``{"ready": pid}`` once its imports are
done, then answers each ``{"fork": [{"argv": [...], "log": path}, ...]}`` read from stdin with
``{"pids": [...]}``. It exits when stdin closes. Every process it makes carries the cluster's
tag in its environment, so the guard (``helpers.cluster.watchdog``) can end them all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PRELOAD = ("torch", "torch.distributed", "torch.nn", "numpy", "ipyparallel.engine.app",
           "ipykernel.ipkernel", "helpers.cluster.engine", "helpers.calls.trace")


class ForkServerError(RuntimeError):
    """The fork server did not start or did not answer; the message says why."""


def _preload() -> None:
    """Import what every engine needs, and check that nothing opened CUDA."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    if torch.cuda.is_initialized():  # pragma: no cover - needs a GPU and a misbehaving import
        raise ForkServerError("CUDA was initialised before forking; engines could not use it")


def _become_engine(argv: list[str], log: str) -> None:
    """In a fresh child: reset the process state, then run an ipyparallel engine; never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import numpy
        import torch

        # a fresh process seeds its generators from the system's entropy; a fork would share its
        # parent's: seed numpy's and torch's CPU generator again (CUDA's are not touched yet)
        numpy.random.seed()
        torch.default_generator.seed()
        from ipyparallel.engine.app import IPEngine

        IPEngine.launch_instance(argv=argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever it was goes to the engine's log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(stdin: Any = sys.stdin, stdout: Any = sys.stdout) -> int:
    """Preload, say ready, then fork engines on request until stdin closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel at once
    _preload()
    print(json.dumps({"ready": os.getpid()}), file=stdout, flush=True)
    for line in stdin:
        request = json.loads(line)
        pids = []
        for engine in request["fork"]:
            pid = os.fork()
            if pid == 0:
                _become_engine(engine["argv"], engine["log"])
            pids.append(pid)
        print(json.dumps({"pids": pids}), file=stdout, flush=True)
    return 0


def main() -> None:
    """Serve until stdin closes, then leave at once: there is nothing to clean up, and the
    interpreter's own shutdown with torch loaded would take most of a second."""
    code = serve()
    sys.stdout.flush()
    os._exit(code)


class ForkServer:
    """The kernel's handle on a fork server process: start it, fork engines, end it."""

    def __init__(self, env: dict[str, str], log: Path, prefix: list[str] | None = None):
        """prefix: a command that runs the server (unshare ... exec: the same process)."""
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "helpers.cluster.forkserver"], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                start_new_session=True,
            )
        self.ready = False

    def _answer(self, timeout: float) -> dict[str, Any]:
        """The server's next line, within timeout seconds, or a ForkServerError saying why."""
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                doing = "forking" if self.ready else "still loading torch and ipyparallel"
                raise ForkServerError(f"the process that starts them (pid {self.proc.pid}) was "
                                      f"{doing}")
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
            raise ForkServerError(f"the process that starts them (pid {self.proc.pid}) exited; "
                                  "its log ends:\n" + "\n".join("    " + t for t in tail))
        return json.loads(line)

    def fork(self, engines: list[dict[str, Any]], timeout: float) -> list[int]:
        """Fork one engine per {"argv": [...], "log": path}; return their pids."""
        deadline = time.monotonic() + timeout
        if not self.ready:
            self._answer(timeout)
            self.ready = True
        try:
            self.proc.stdin.write(json.dumps({"fork": engines}) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # a dead server's pipe: the answer below says so
            pass
        return self._answer(max(0.1, deadline - time.monotonic()))["pids"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Close its stdin (it exits by itself), and make sure it has."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(2)
        self.proc.stdout.close()


if __name__ == "__main__":
    main()
