"""Execute notebooks in place so their committed outputs are fresh: `make outputs`.

Runs each notebook top to bottom in a kernel of this environment, non-interactively
(IPP_NONINTERACTIVE=1, so stored outputs are grouped by engine and compare equal run
after run), and writes it back with its outputs and execution counts.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def clean(output: dict) -> None:
    """What a reader of the stored notebook should not see: terminal colour codes (%px's
    "Out[0:5]:" prefix is red in a terminal) and ipyparallel's record of each engine's
    execution, which it attaches to every result it displays (ids, time stamps, the code)."""
    if "engine_id" in output.get("metadata", {}):
        output["metadata"] = {}
    if "text" in output:
        output["text"] = ANSI.sub("", output["text"])
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/") and isinstance(value, str):
            output["data"][mime] = ANSI.sub("", value)


def execute(path: Path, timeout: int = 300) -> float:
    """Execute one notebook in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:  # no time stamps: a re-executed notebook differs only where it changed
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            clean(output)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> int:
    os.environ["IPP_NONINTERACTIVE"] = "1"
    for p in paths:
        print(f"{p}: {execute(Path(p)):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
