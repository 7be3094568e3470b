"""Where is each rank right now? Its Python stack, taken from outside the engine.

Introduced in notebook 06. A rank that hangs is usually blocked inside C++ (a collective, a
``recv``), where it cannot answer the notebook; so the stack is read from outside the process:
- with py-spy (``py-spy dump --pid``), which reads the process's memory: all threads, the
  innermost frame first, C++ frames too with ``native=True``. It needs permission to trace
  the process (the same user, and a ptrace policy that allows it);
- otherwise with Python's own ``faulthandler``, which each engine arms when it joins a group
  (``arm``): on SIGUSR1 it writes every thread's stack to a file, from a signal handler that
  needs no lock, so it works while the rank is blocked in C++ too.
``summary`` turns a stack into one line a learner reads: "in all_reduce, called from
train_step (line 3), called from the cell (line 5)".
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STACK_SIGNAL = signal.SIGUSR1
# frames that only wrap the call the learner made (the course's record, torch's logger)
WRAPPERS = ("helpers/calls/trace.py", "torch/distributed/c10d_logger.py")
_PY_SPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>[^()]*):(?P<line>\d+)\)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')


# ---- inside each engine ------------------------------------------------------------------
def stack_file(directory: str | Path, pid: int) -> Path:
    """Where the engine of process pid writes its stack when asked with SIGUSR1."""
    return Path(directory) / f"stack-{pid}.txt"


def arm(directory: str | Path) -> None:
    """On an engine: dump every thread's stack to stack_file(directory, pid) on SIGUSR1."""
    import faulthandler
    import threading

    path = stack_file(directory, os.getpid())
    path.write_text(f"main thread 0x{threading.main_thread().ident:016x}\n")
    handle = open(path, "a")  # appends at the end, also after the reader has emptied the file
    faulthandler.register(STACK_SIGNAL, file=handle, all_threads=True, chain=False)
    globals()["_armed"] = handle  # keep the file object alive


# ---- from the notebook -------------------------------------------------------------------
def py_spy() -> str | None:
    """The py-spy program of this environment, or None if it is not installed."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def with_py_spy(pid: int, native: bool = False, timeout: float = 5.0) -> str:
    """py-spy's dump of every thread of process pid; RuntimeError saying why if it cannot."""
    program = py_spy()
    if program is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    cmd = [program, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    env = {k: v for k, v in os.environ.items() if k not in ("CLICOLOR_FORCE", "FORCE_COLOR")}
    env.update(NO_COLOR="1", CLICOLOR="0")  # a Jupyter kernel asks for colours: plain text here
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"py-spy did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"py-spy could not attach: {reason[-1] if reason else 'no reason'}"
                           " (it needs permission to trace the process: the same user, and "
                           "a ptrace policy that allows it)")
    return _ANSI.sub("", done.stdout)


def with_faulthandler(pid: int, directory: str | Path, timeout: float = 5.0,
                      send: Callable[[int, int], None] = os.kill) -> str:
    """The stack the engine's faulthandler writes on SIGUSR1 (see arm); send(pid, signal)
    delivers the signal (os.kill here; through Slurm for an engine on another host)."""
    path = stack_file(directory, pid)
    if not path.exists():
        raise RuntimeError("its faulthandler is not armed (the engine has not joined a group)")
    header = path.read_text().splitlines()[0]
    with open(path, "w") as f:  # the engine keeps appending at its own offset: start clean
        f.write(header + "\n")
    send(pid, STACK_SIGNAL)
    deadline, size, still = time.monotonic() + timeout, -1, 0
    while time.monotonic() < deadline:  # written from a signal handler: wait until it stops
        time.sleep(0.02)
        now = path.stat().st_size
        still = still + 1 if now == size else 0
        size = now
        if still >= 3 and "File " in (text := path.read_text(errors="replace")):
            return text
    raise RuntimeError(f"no stack was written within {timeout:g} s")


def take(pid: int, directory: str | Path | None, native: bool = False,
         send: Callable[[int, int], None] | None = None) -> str:
    """One process's stack: py-spy if it can attach, else faulthandler, else why neither.
    With send (a process on another host, signalled through send), faulthandler only."""
    if send is not None and directory is not None:
        try:
            return ("(on another host: stack written by the engine's faulthandler)\n"
                    + with_faulthandler(pid, directory, send=send))
        except (RuntimeError, OSError) as e:
            return f"(no stack: {e})"
    try:
        return with_py_spy(pid, native=native)
    except RuntimeError as first:
        if directory is None:
            return f"(no stack: {first})"
        try:
            return f"({first}; stack written by the engine's faulthandler instead)\n" + (
                with_faulthandler(pid, directory))
        except (RuntimeError, OSError) as second:
            return f"(no stack: {first}; faulthandler: {second})"


def take_many(pids: dict[int, int], directory: str | Path | None, native: bool = False,
              senders: dict[int, Callable[[int, int], None]] | None = None) -> dict[int, str]:
    """{key: stack} for {key: pid}, all taken at once (8 ranks take about as long as one);
    senders: {key: send} for processes on other hosts (see take)."""
    senders = senders or {}
    with ThreadPoolExecutor(max_workers=max(1, len(pids))) as pool:
        futures = {key: pool.submit(take, pid, directory, native, senders.get(key))
                   for key, pid in pids.items()}
        return {key: f.result() for key, f in futures.items()}


# ---- reading a stack ---------------------------------------------------------------------
def main_thread_frames(text: str) -> list[tuple[str, str, int]]:
    """(function, file, line) of the main thread, innermost first, from either kind of dump."""
    lines = _ANSI.sub("", text).splitlines()
    if any(ln.startswith("Thread ") and "MainThread" in ln for ln in lines):  # py-spy
        start = next(i for i, ln in enumerate(lines) if "MainThread" in ln)
        frames = []
        for ln in lines[start + 1:]:
            if ln.startswith("Thread "):
                break
            if (m := _PY_SPY_FRAME.match(ln)) is not None:
                frames.append((m["func"], m["file"], int(m["line"])))
        return frames
    main = next((ln.split()[-1] for ln in lines if ln.startswith("main thread 0x")), None)
    blocks, current = {}, None  # faulthandler: "Thread 0x... (most recent call first):"
    for ln in lines:
        if ln.startswith(("Thread 0x", "Current thread 0x")):
            current = ln.split()[1] if ln.startswith("Thread") else ln.split()[2]
            blocks[current] = []
        elif current and (m := _FAULTHANDLER_FRAME.match(ln)) is not None:
            blocks[current].append((m["func"], m["file"], int(m["line"])))
    return blocks.get(main, next(iter(blocks.values()), []))


def _is_cell(file: str) -> bool:
    """IPython names a cell's code after a number: 3436970586.py, or <ipython-input-...>."""
    name = Path(file).name
    return name[:-3].isdigit() if name.endswith(".py") else name.startswith("<ipython")


def summary(text: str) -> str:
    """One line: where the main thread is, from the innermost call out to the cell."""
    frames = main_thread_frames(text)
    if not frames:
        return "stack unknown"
    running = next((i for i, (func, file, _) in enumerate(frames)
                    if func.endswith("run_code") and "IPython/" in file), None)
    if running is None:
        return "waiting for work (no cell is running)"
    kept = [f for f in frames[:running] if not f[1].endswith(WRAPPERS)]
    parts = []
    for i, (func, file, line) in enumerate(kept[:5]):
        if _is_cell(file):
            where = f"the cell (line {line})" if func == "<module>" else f"{func} (line {line})"
        else:
            where = func if i == 0 else f"{func} ({Path(file).name}:{line})"
        parts.append(("in " if i == 0 else "called from ") + where)
    return ", ".join(parts) or "in the cell"
