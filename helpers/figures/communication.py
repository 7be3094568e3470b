"""How fast and in what order the ranks communicate: bandwidth curves (02), the call record
and fault timings (06), and a per-rank timeline of compute and communication (08, 09)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..text import format_bytes
from .style import DPI, MAX_WIDTH


def plot_bandwidth(
    curves: Mapping[str, Mapping[int, float]],
    title: str,
    reference: str | None = None,
    ylabel: str = "bandwidth (MB/s)",
    ticks: Sequence[int] | None = None,
) -> Figure:
    """Bandwidth (bytes/s, shown in MB/s) against message size (bytes), log-log (notebook 02).

    curves maps a label to {size in bytes: bytes/s}; the curve named `reference` (e.g. the
    point-to-point bandwidth) is drawn as a dashed black line; `ticks` (e.g. the measured
    sizes) puts the size axis's labels there, so each point can be found in a table.
    """
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=DPI)
    for label, points in curves.items():
        sizes = sorted(points)
        style = {"color": "black", "linestyle": "--"} if label == reference else {"marker": "o"}
        ax.plot(sizes, [points[s] / 1e6 for s in sizes], label=label, markersize=3, **style)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=32))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda b, _: format_bytes(b)))
    if ticks is not None:
        ax.set_xticks(list(ticks), [format_bytes(b) for b in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- training (notebooks 03 and 04) ----------------------------------------------
def plot_calls(traces: Any, last: int = 12, ax: Any = None) -> Figure:
    """The call record (notebook 06): ranks top to bottom, calls left to right by sequence
    number, rows where the ranks disagree in red, calls that failed hatched."""
    from ..calls.table import describe, rows

    selected = rows(traces)[-last:]
    ranks = sorted(traces)
    if ax is None:
        size = (min(MAX_WIDTH, 1.2 + 1.1 * len(selected)), 0.9 + 0.45 * len(ranks))
        _, ax = plt.subplots(figsize=size, dpi=DPI)
    ops = sorted({e["op"] for row in selected for e in row.cells.values() if e})
    colors = {op: plt.get_cmap("tab10")(i % 10) for i, op in enumerate(ops)}
    for x, row in enumerate(selected):
        if row.problem:
            ax.axvspan(x - 0.5, x + 0.5, color="#f4cccc", zorder=0)
        for r, entry in row.cells.items():
            if entry is None:
                continue
            bad = entry["state"] not in ("done", "issued")
            ax.add_patch(plt.Rectangle(
                (x - 0.45, r - 0.35), 0.9, 0.7, facecolor=colors[entry["op"]], alpha=0.5,
                edgecolor="red" if bad else "black", linewidth=2 if bad else 0.5,
                hatch="//" if bad else None))
            ax.text(x, r, describe(entry).split(" ")[0], ha="center", va="center", fontsize=6)
    ax.set_xlim(-0.5, max(len(selected), 1) - 0.5)
    ax.set_ylim(max(ranks, default=0) + 0.5, -0.5)
    ax.set_xticks(range(len(selected)), [f"{row.group[:5]}\n{row.label}" for row in selected],
                  fontsize=7)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks], fontsize=8)
    ax.set_title("calls by sequence number (red: ranks disagree; hatched: failed)", fontsize=9)
    return ax.figure


def plot_timings(times: Mapping[str, tuple[float, float, str]], timeout: float) -> Figure:
    """Fault drills (notebook 06): seconds from fault to error and to recover, timeout marked."""
    names = list(times)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 + 0.4 * len(names)), dpi=DPI)
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], [times[n][0] for n in names], 0.4, label="fault → error")
    ax.barh([y + 0.2 for y in ys], [times[n][1] for n in names], 0.4, label="recovery")
    ax.axvline(timeout, color="grey", linestyle="--", label=f"group timeout ({timeout:g} s)")
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig




COMMS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
COMM_COLOURS = {"all_reduce": "C4", "all_gather": "C9", "reduce_scatter": "C6", "all_to_all": "C5"}


def plot_timeline(rows: Mapping[int, Sequence[tuple[str, float, float]]],
                  title: str = "") -> Figure:
    """One training step per rank (notebook 04): compute on one lane, communication below it.

    rows maps a rank to (label, start, end) in seconds from the start of its step; labels
    starting with "all_reduce", "all_gather", "reduce_scatter" (notebook 08) or "all_to_all"
    (10) go on the communication lane, coloured by kind; "wait" is drawn hatched.
    """
    colours = {"forward": "C0", "backward": "C1", "step": "C2", "wait": "0.85", "sleep": "C3",
               "attention": "C0", "experts": "C2"}
    ranks = sorted(rows)
    fig, ax = plt.subplots(figsize=(7, 0.75 * len(ranks) + 0.9), dpi=DPI)
    end = max((e for r in ranks for _, _, e in rows[r]), default=1.0) * 1e3
    for i, r in enumerate(ranks):
        work = [p for p in rows[r] if not p[0].startswith(COMMS)]
        comms = sorted((p for p in rows[r] if p[0].startswith(COMMS)), key=lambda p: p[1])
        for label, start, stop in work:
            ax.barh(i - 0.18, (stop - start) * 1e3, left=start * 1e3, height=0.32,
                    color=colours.get(label, "0.5"), edgecolor="black", linewidth=0.4,
                    hatch="//" if label == "wait" else None)
        height = 0.34 / max(len(comms), 1)  # each all-reduce on a line of its own in the lane
        for k, (label, start, stop) in enumerate(comms):
            ax.barh(i + 0.02 + (k + 0.5) * height, (stop - start) * 1e3, left=start * 1e3,
                    height=height * 0.8, alpha=0.7, linewidth=0,
                    color=COMM_COLOURS[next(c for c in COMMS if label.startswith(c))])
    handles = [Rectangle((0, 0), 1, 1, color=c, label=n) for n, c in colours.items()
               if any(label == n for r in ranks for label, _, _ in rows[r])]
    for kind in COMMS:
        if any(label.startswith(kind) for r in ranks for label, _, _ in rows[r]):
            handles.append(Rectangle((0, 0), 1, 1, color=COMM_COLOURS[kind], alpha=0.7,
                                     label=f"{kind} (lower lane)"))
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=3)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.4, -0.9)
    ax.set_xlim(0, end * 1.02)
    ax.set_xlabel("milliseconds from the start of the step")
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    fig.tight_layout()
    return fig
