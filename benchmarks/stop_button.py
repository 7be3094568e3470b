"""The stop button at a random instant of a %%px cell's life, then the next cell at once.

A real Jupyter kernel (started as JupyterLab starts one) runs a cluster. Each round sends a
%%px cell, presses the stop button (SIGINT to the kernel, as JupyterLab sends it) after a
random delay, waits for the cell to end, then runs the next %%px cell and asks every rank
whether it ran. The delay and the cell's own length are drawn so that the press falls in every
phase of the cell's life: before its request leaves the kernel, while it reaches some ranks
and not others, while the ranks run, while their replies are taken in, while outputs are
shown, and after the cell has ended. Prints figures, asserts nothing:

- next cells lost: a next cell that did not run on every rank, or raised;
- slow stops: a stopped cell that ended more than 2 s after the press;
- the worst time from the press to the cell's end;
- long cells not stopped: a cell that sleeps far longer than the round waits and did not end
  with the report of an interrupt, or as stopped as it began (a press that was lost).

    .venv/bin/python benchmarks/stop_button.py [--ranks 2 3 4] [--rounds 300] [--seed 0]

tests/test_stop_button.py runs a short version (rounds() below) in make test.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kernel import Kernel  # tests/kernel.py, found through the line above

SLOW = 2.0  # seconds from the press to the stopped cell's end that count as slow
# the cells a round may send: (weight, %%px code); {n} is a number of the round's own
CELLS = [
    (3, "import time\ntime.sleep({long})"),                                 # long: stopped
    (2, "import time\nfor i in range(40):\n    print(rank, i)\n    time.sleep(0.005)"),
    (2, "import time\ntime.sleep({short})\nprint('done', rank)"),           # ends near the press
    (1, "x = {n}"),                                                         # ends at once
]


@dataclass
class Tally:
    """What the rounds saw."""

    ranks: int
    rounds: int = 0
    lost: list[str] = field(default_factory=list)  # what went wrong with each lost next cell
    slow: list[float] = field(default_factory=list)
    worst: float = 0.0
    # long cells (they cannot end on their own while the round waits) that did not end with
    # the report of an interrupt: a press that was lost
    unreported: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.ranks} ranks: {self.rounds} rounds, next cells lost {len(self.lost)}, "
                f"stopped cells slower than {SLOW:g} s {len(self.slow)}, worst "
                f"{self.worst:.2f} s, long cells not stopped "
                f"{len(self.unreported)}")


def start(ranks: int) -> Kernel:
    """A kernel with a cluster of `ranks` ranks (JupyterLab's environment: interactive)."""
    kernel = Kernel({"IPP_NONINTERACTIVE": ""})
    kernel.run(f"from helpers import start_cluster\ncluster = start_cluster(n={ranks})", 120)
    return kernel


def one_round(kernel: Kernel, ranks: int, n: int, gen: random.Random, tally: Tally,
              long: float = 30) -> None:
    """One press at a random instant, then the next cell; the outcome goes to tally. A long
    cell sleeps `long` seconds."""
    code = gen.choices([c for _, c in CELLS], [w for w, _ in CELLS])[0]
    code = code.format(n=n, short=round(gen.uniform(0.0, 0.25), 3), long=long)
    msg_id = kernel.submit("%%px\n" + code)
    kernel.wait_busy(msg_id, timeout=60)  # the cell's life begins when the kernel takes it
    time.sleep(gen.choice([0.0, gen.uniform(0.0, 0.05), gen.uniform(0.0, 0.4)]))
    pressed = time.monotonic()
    kernel.interrupt()
    status, outputs = kernel.wait(msg_id, timeout=120)
    took = time.monotonic() - pressed
    tally.rounds += 1
    tally.worst = max(tally.worst, took)
    if took > SLOW:
        tally.slow.append(took)
        print(f"  round {n}: the stopped cell ended {took:.2f} s after the press:\n"
              f"    {outputs.strip()[-600:]}", flush=True)
    # stopped: the report of the ranks, or the kernel's "stopped as it began" (the press landed
    # while the kernel was taking the cell in: no rank got it)
    if f"sleep({long})" in code and not any(
            said in outputs for said in ("Interrupted:", "stopped as it began")):
        tally.unreported.append(f"round {n}: {status}: {outputs.strip()[-300:]}")
        print("  " + tally.unreported[-1], flush=True)
    status, outputs = kernel.wait(kernel.submit(f"%%px\nanswered = {n}"), timeout=120)
    if status != "ok":
        tally.lost.append(f"round {n}: the next cell failed: {outputs.strip()[-400:]}")
        print("  " + tally.lost[-1], flush=True)
        return
    got = kernel.run("print(cluster.view.pull('answered', block=True))", 60).strip()
    if got != str([n] * ranks):
        tally.lost.append(f"round {n}: ranks hold answered = {got}, expected {n} on each")
        print("  " + tally.lost[-1], flush=True)


def rounds(ranks: int, count: int, seed: int = 0, long: float = 30) -> Tally:
    """`count` rounds on a fresh kernel and cluster of `ranks` ranks."""
    gen, tally = random.Random(seed), Tally(ranks)
    kernel = start(ranks)
    try:
        for n in range(count):
            one_round(kernel, ranks, n, gen, tally, long)
    finally:
        kernel.close()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.pop("IPP_NONINTERACTIVE", None)
    results = []
    for ranks in args.ranks:
        started = time.monotonic()
        results.append(rounds(ranks, args.rounds, args.seed))
        print(results[-1].line() + f" ({time.monotonic() - started:.0f} s)", flush=True)
    print("\n".join(["", "summary:"] + [t.line() for t in results]))


if __name__ == "__main__":
    main()
