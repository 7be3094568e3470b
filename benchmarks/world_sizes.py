"""Every notebook at every world size: a table of size x notebook (pass, skipped steps, time).

Each notebook runs top to bottom in a fresh kernel of this environment, as `make outputs`
runs it, with COURSE_WORLD_SIZE set; nothing is written back. A notebook passes when no cell
raises. A step that needs a world size the cluster does not have prints a line starting with
"skipped:" (with the size it needs); those lines are counted and listed under the table. A
notebook whose every step needs more ranks refuses in its first cell (start_cluster's
min_ranks: "this notebook needs at least N ranks"): the table shows "needs N", not a failure.

Prints figures, asserts nothing about speed; exits 1 if any notebook failed.
Run: .venv/bin/python benchmarks/world_sizes.py [--sizes 1-8,16] [--solutions] [NOTEBOOK ...]
  (one cluster at a time: the notebooks run one after the other)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = re.compile(r"^(?:\[stdout:\d+\] )?skipped: (.+)$", re.MULTILINE)
NEEDS = re.compile(r"ClusterConfigError: this notebook needs at least (\d+) ranks")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Result:
    ok: bool
    seconds: float
    skipped: list[str] = field(default_factory=list)
    error: str = ""
    needs: int = 0  # the notebook refused this world size: it needs at least this many ranks


def parse_sizes(text: str) -> list[int]:
    """'1-8,16' -> [1, 2, ..., 8, 16]."""
    sizes: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        sizes += range(int(lo), int(hi or lo) + 1)
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give world sizes from 1 up, e.g. 1-8,16")
    return sizes


def skipped_lines(nb) -> list[str]:
    """Every distinct 'skipped: ...' line the notebook printed, in order."""
    seen: list[str] = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") or output.get("data", {}).get("text/plain", "")
            for line in SKIPPED.findall(text if isinstance(text, str) else "".join(text)):
                if line not in seen:
                    seen.append(line)
    return seen


def run(path: Path, size: int, timeout: int) -> Result:
    """Execute one notebook at one world size (in memory, nothing written)."""
    nb = nbformat.read(path, as_version=4)
    os.environ["COURSE_WORLD_SIZE"] = str(size)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        where = next((i for i, c in enumerate(nb.cells)
                      if any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        text = ANSI.sub("", str(err))
        if (refused := NEEDS.search(text)) and size < int(refused.group(1)):
            return Result(True, time.perf_counter() - start, needs=int(refused.group(1)))
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        errors = [line for line in lines if re.search(r"\w(Error|Exception): ", line)]
        name = errors[0] if errors else (lines[-1] if lines else type(err).__name__)
        return Result(False, time.perf_counter() - start, skipped_lines(nb),
                      f"cell {where}: {name[:200]}")
    return Result(True, time.perf_counter() - start, skipped_lines(nb))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1-8,16"))
    parser.add_argument("--solutions", action="store_true", help="the worked solutions too")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks]
    paths = paths or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.solutions and not args.notebooks:
        paths += sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
    os.environ["IPP_NONINTERACTIVE"] = "1"

    results: dict[tuple[int, Path], Result] = {}
    for size in args.sizes:
        for path in paths:
            r = results[size, path] = run(path, size, args.timeout)
            verdict = (f"needs {r.needs} ranks" if r.needs else "pass") if r.ok \
                else f"FAIL ({r.error})"
            print(f"{size:>3} ranks  {path.relative_to(ROOT)}: {verdict}, "
                  f"{len(r.skipped)} skipped, {r.seconds:.1f} s", flush=True)

    names = [("sol " if p.parent.name == "solutions" else "") + p.name[:2] for p in paths]
    print("\nranks | " + " | ".join(names))
    print("---|" + "---|" * len(names))
    for size in args.sizes:
        cells = []
        for path in paths:
            r = results[size, path]
            if r.needs:
                cells.append(f"needs {r.needs}")
                continue
            mark = "pass" if r.ok else "FAIL"
            cells.append(f"{mark} {len(r.skipped)}s {r.seconds:.0f}s" if r.skipped
                         else f"{mark} {r.seconds:.0f}s")
        print(f"{size} | " + " | ".join(cells))
    print("\n(n s: steps skipped; each line below names the size it needs)")
    for (size, path), r in results.items():
        for line in r.skipped:
            print(f"  {size} ranks, {path.name}: {line}")
        if not r.ok:
            print(f"  {size} ranks, {path.name}: FAILED at {r.error}")
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
