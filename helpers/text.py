"""Text for people: the first line of an error, aligned tables, byte counts and durations.

Used everywhere a helper reports something in words (introduced in notebook 00 with the
cluster's table). Backends write long, multi-line errors; the course shows their first line.
Long cells show a progress bar while a learner runs them, and nothing where outputs are stored.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any


def first_line(error: BaseException | str) -> str:
    """'Type: first line of the message' for an error (a remote one too), or a text's first line.

    Never fails: a blank message gives the type alone, a blank text gives ''.
    """
    if isinstance(error, str):
        lines = error.strip().splitlines()
        return lines[0].strip() if lines else ""
    name = getattr(error, "ename", None) or type(error).__name__  # ipyparallel's RemoteError
    message = getattr(error, "evalue", None) if hasattr(error, "ename") else str(error)
    line = first_line(str(message or ""))
    return f"{name}: {line}" if line else name


def backend_message(error: BaseException | str, width: int = 80) -> str:
    """A backend's error as one short line (notebook 01): its first line, without the source
    location gloo puts in front ('[.../pair.cc:553] '), cut at a word to at most width."""
    line = first_line(str(error))
    if line.startswith("[") and "] " in line:
        line = line.split("] ", 1)[1]
    return textwrap.shorten(line, width, placeholder=" ...")


def table(rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Rows as aligned columns (the first row is the header); columns in `right` align right."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells if i < len(row))
              for i in range(max(map(len, cells), default=0))]
    lines = []
    for row in cells:
        parts = [v.rjust(w) if i in right else v.ljust(w)
                 for i, (v, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def format_bytes(nbytes: float) -> str:
    """A byte count for people: 8 B, 32 KiB, 16 MiB (notebook 02)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def format_seconds(seconds: float) -> str:
    """Seconds with one decimal, two below one second: '3.5 s', '0.06 s'."""
    return f"{seconds:.2f} s" if seconds < 1 else f"{seconds:.1f} s"


def live() -> bool:
    """True in a notebook a learner runs (make lab); False where outputs are stored or tested
    (IPP_NONINTERACTIVE=1: make test, make outputs), which must read the same on every run."""
    return not os.environ.get("IPP_NONINTERACTIVE")


def progress_line(done: int, total: int, label: str, width: int = 24) -> str:
    """`label [#########       ] 9/24`: one line, to be redrawn in place."""
    filled = width * done // max(total, 1)
    return f"{label} [{'#' * filled}{' ' * (width - filled)}] {done}/{total}"


def progress(items: Sequence[Any], label: str, show: bool = True) -> Iterator[Any]:
    """Yield items; in a live notebook, show a progress bar redrawn in place (notebooks 02, 03
    and 04: on rank 0 only, show=(rank == 0)). Prints nothing where outputs are stored. The bar
    is redrawn only when it grows, so a loop of many short steps prints a few dozen times."""
    if not (show and live()):
        yield from items
        return
    drawn = None
    for done, item in enumerate(items):
        if (line := progress_line(done, len(items), label)).split("]")[0] != drawn:
            drawn = line.split("]")[0]
            print("\r" + line, end="", flush=True)
        yield item
    print("\r" + progress_line(len(items), len(items), label), flush=True)
