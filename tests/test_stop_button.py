"""The stop button at random instants of %%px cells in a real kernel: the short version of
benchmarks/stop_button.py (which prints the figures for 300 rounds at 2, 3 and 4 ranks).

Judged without a clock: a long cell sleeps 600 s, far past the round's wait (120 s), so one
that ends at all ended by the press, and it must say so ("Interrupted: ..." with each rank's
outcome, or "stopped as it began" when the press came while the kernel took the cell in, before
any rank got it); the next cell must
run on every rank. How long each stop took is printed, not judged."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import stop_button  # benchmarks/stop_button.py, found through the line above


def test_the_stop_button_at_random_instants_stops_the_cell_and_loses_no_next_cell():
    tally = stop_button.rounds(ranks=3, count=30, seed=21, long=600)
    print(tally.line())
    assert tally.rounds == 30
    assert not tally.lost, "\n".join(tally.lost)
    assert not tally.unreported, "\n".join(tally.unreported)
