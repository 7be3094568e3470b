"""What every lesson notebook's text must have, read from the files (no kernel): the skeleton's
first cell (what you will learn, prerequisites, a time), a Sources section with links, no word
of the test harness in the lesson's prose, and the README's course map giving the same time."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HARNESS = ("NBVAL", "nbval", "IPP_NONINTERACTIVE", "make test")


def _markdown(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells
            if c.cell_type == "markdown"]


def minutes(text: str) -> int | None:
    """'about 75 minutes' -> 75, 'about 2 hours' -> 120, '80 min' -> 80, '2 h' -> 120."""
    if m := re.search(r"(\d+(?:\.\d+)?)\s*(minutes|min|hours|hour|h)\b", text):
        value, unit = float(m.group(1)), m.group(2)
        return round(value * 60) if unit.startswith("h") else round(value)
    return None


def test_the_time_reader_reads_both_ways_of_writing_it():
    assert minutes("**Time:** about 2 hours: about 80 minutes for the steps") == 120
    assert minutes("**Time:** about 75 minutes: 45 for the steps") == 75
    assert minutes("| 80 min |") == 80 and minutes("| 1.5 h |") == 90 and minutes("soon") is None


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_a_lesson_has_its_skeleton_sources_and_no_harness_talk(path):
    cells = _markdown(path)
    first = cells[0]
    for part in ("What you will learn", "Prerequisites", "**Time:**"):
        assert part in first, f"{path.name}: the first cell has no '{part}'"
    sources = [c for c in cells if re.search(r"^#+\s*Sources\b", c, re.M)]
    assert sources, f"{path.name}: no Sources section"
    assert len(re.findall(r"https?://", sources[-1])) >= 3, f"{path.name}: Sources has no links"
    for i, cell in enumerate(cells):
        said = [w for w in HARNESS if w in cell]
        assert not said, f"{path.name}, markdown cell {i}: speaks of the test harness ({said})"


def test_the_course_map_gives_each_lesson_the_time_the_lesson_states():
    readme = (ROOT / "README.md").read_text()
    for path in LESSONS:
        row = next((line for line in readme.splitlines()
                    if line.startswith("| [") and f"(notebooks/{path.name})" in line), None)
        assert row is not None, f"README's course map has no row for {path.name}"
        stated = minutes(_markdown(path)[0].split("**Time:**", 1)[1])
        mapped = minutes(row.rstrip(" |").rsplit("|", 1)[1])
        assert stated == mapped, f"{path.name} says {stated} min, the README {mapped} min"
