"""Every figure of the course, drawn from real values pulled from the ranks.

Per-rank pictures (notebooks 01 and 02): one row per rank, one coloured cell per value,
before and after an operation. Bandwidth curves (02). Shards, loss curves, step times and a
bucket sweep for the training notebooks (03, 04). The call record and fault timings (06).
Each rank's slice of a split layer, and a 2-D mesh's groups (09).
Each function takes plain values (tensors, numbers) and returns the matplotlib Figure, drawn
at one resolution (``DPI``) with one font size scale, so every figure looks alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipyparallel as ipp
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .text import format_bytes

DPI = 100  # one size for every figure of the course: 100 pixels per inch of figure size


def crisp_in_notebooks() -> None:
    """Show figures in a notebook as PNGs of twice the pixels, displayed at the same size
    ('retina'): sharp on high-density screens, about twice the bytes, one format for all."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # not in IPython: nothing to configure
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


crisp_in_notebooks()
Row = torch.Tensor | Sequence[torch.Tensor] | None
CELL, GAP = 0.5, 0.12  # inches per cell, and between groups of cells
MAX_WIDTH = 9.0  # inches: 900 pixels, the width of a notebook's output area (JupyterLab, GitHub)


def _groups(row: Row) -> list[list[float]]:
    """A row as groups of values: one group per tensor."""
    if row is None:
        return []
    tensors = [row] if isinstance(row, torch.Tensor) else list(row)
    return [t.detach().cpu().double().flatten().tolist() for t in tensors]


def _label(value: float) -> str:
    """A cell's text: integers without a decimal point, other numbers with 3 digits."""
    return f"{value:.0f}" if value == int(value) and abs(value) < 1e6 else f"{value:.3g}"


def _draw_panel(
    ax: Any, rows: Sequence[Row], title: str, norm: Normalize, width: float, labels: bool,
    fontsize: float = 8,
) -> None:
    """One panel: a row of coloured, labelled cells per rank (rank labels if `labels`)."""
    cmap = plt.get_cmap("viridis")
    for r, row in enumerate(rows):
        x = 0.0
        groups = _groups(row)
        if not groups:
            ax.text(0.05, r, "(nothing)", va="center", ha="left", color="0.5", fontsize=8)
        for group in groups:
            for value in group:
                colour = cmap(norm(value))
                ax.add_patch(Rectangle((x, r - 0.45), 1, 0.9, facecolor=colour, edgecolor="white"))
                light = sum(colour[:3]) > 1.5
                ax.text(x + 0.5, r, _label(value), ha="center", va="center", fontsize=fontsize,
                        color="black" if light else "white")
                x += 1
            x += GAP / CELL
    ax.set_xlim(0, width)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [f"rank {r}" for r in range(len(rows))] if labels else [])
    ax.set_xticks([])
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=10, loc="left")
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)


def _row_width(row: Row) -> float:
    """Width of a row in cell units, gaps between groups included."""
    groups = _groups(row)
    return sum(len(g) for g in groups) + GAP / CELL * max(len(groups) - 1, 0)


def draw_ranks(panels: Mapping[str, Sequence[Row]], title: str = "") -> Figure:
    """Side-by-side panels (e.g. before / after), one row per rank, values in coloured cells.

    Introduced in notebook 01. All panels share one colour scale, so equal values have
    equal colours before and after.
    """
    if not panels:
        raise ValueError("nothing to draw: give at least one panel")
    n_ranks = {len(rows) for rows in panels.values()}
    if len(n_ranks) != 1:
        raise ValueError(f"panels have different numbers of ranks: {sorted(n_ranks)}")
    values = [v for rows in panels.values() for row in rows for g in _groups(row) for v in g]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    norm = Normalize(lo, hi if hi > lo else lo + 1)
    # a panel is as wide as its longest row, and wide enough for its title (~0.15 cell a letter)
    widths = [max([_row_width(row) for row in rows] + [2.0, 0.15 * len(name)])
              for name, rows in panels.items()]
    n = n_ranks.pop()
    margins = 0.4 * len(panels) + 0.8
    # many cells: narrower ones, so that the figure is shown at full size, its text readable
    cell = min(CELL, (MAX_WIDTH - margins) / sum(widths))
    fig, axes = plt.subplots(
        1, len(panels), squeeze=False, dpi=DPI, width_ratios=widths,
        figsize=(cell * sum(widths) + margins, 0.4 * n + 0.7),
    )
    for i, (ax, (name, rows), width) in enumerate(zip(axes[0], panels.items(), widths)):
        _draw_panel(ax, rows, name, norm, width, labels=i == 0, fontsize=8 if cell > 0.38 else 7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def show_ranks(view: ipp.DirectView, panels: Mapping[str, str], title: str = "") -> None:
    """Pull each named variable from every rank and draw them side by side (notebook 01).

    panels maps a panel's title to the name of a variable (or an expression) on the
    engines, e.g. ``{"before": "before", "after": "t"}``.
    """
    from .cluster.px import pull_cpu

    pulled = {label: pull_cpu(view, name) for label, name in panels.items()}
    draw_ranks(pulled, title)
    plt.show()


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
def plot_shards(owner: Sequence[int], world_size: int, first: int = 80) -> Figure:
    """Grid of ranks x the first samples: a filled cell where that rank holds that sample.

    Shards are disjoint and cover the data when every column has exactly one filled cell.
    """
    cols = list(owner)[:first]
    fig, ax = plt.subplots(figsize=(7, 0.3 * world_size + 0.9), dpi=DPI)
    grid = [[1 if o == r else 0 for o in cols] for r in range(world_size)]
    ax.imshow(grid, aspect="auto", cmap="Blues", vmin=0, vmax=1.3, interpolation="nearest")
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_xlabel(f"sample index (first {len(cols)} of {len(owner)})")
    fig.tight_layout()
    return fig


def plot_loss(losses: Sequence[float], accuracy: float | None = None, window: int = 10) -> Figure:
    """Loss per step, with a running mean over window steps; the test accuracy in the title."""
    fig, ax = plt.subplots(figsize=(5.5, 3), dpi=DPI)
    ax.plot(range(len(losses)), losses, lw=0.8, alpha=0.5, label="loss per step")
    if len(losses) >= window:
        mean = [sum(losses[i - window:i]) / window for i in range(window, len(losses) + 1)]
        ax.plot(range(window - 1, len(losses)), mean, lw=1.8, label=f"mean of {window} steps")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    title = "training loss"
    if accuracy is not None:
        title += f" (test accuracy {accuracy:.1%})"
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_step_times(seconds: Mapping[str, float], reference: str) -> Figure:
    """Bars: milliseconds per step of each variant, labelled with its ratio to reference."""
    names = list(seconds)
    ms = [seconds[name] * 1e3 for name in names]
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(names) + 1), dpi=DPI)
    bars = ax.barh(names, ms, color=["0.6" if n == reference else "C0" for n in names])
    for bar, name in zip(bars, names):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {seconds[name] / seconds[reference]:.2f}x", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per training step (label: ratio to the grey bar)")
    ax.set_xlim(0, max(ms) * 1.25)
    fig.tight_layout()
    return fig


def plot_bucket_sweep(
    caps_mb: Sequence[float], seconds: Sequence[float], others: Mapping[str, float]
) -> Figure:
    """DDP's step time against bucket_cap_mb (log scale), other variants as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=DPI)
    ax.plot(caps_mb, [s * 1e3 for s in seconds], "o-", color="C3", label="DDP")
    for i, (name, s) in enumerate(others.items()):
        ax.axhline(s * 1e3, ls="--", color=f"C{i}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("bucket_cap_mb")
    ax.set_ylabel("ms per training step")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_digits(images: Sequence, labels: Sequence[int], n: int = 10) -> Figure:
    """The first n 8x8 digit images (64 values in [0, 1] each) with their labels."""
    fig, axes = plt.subplots(1, n, figsize=(0.8 * n, 1.1), dpi=DPI)
    for ax, image, label in zip(axes, images, labels):
        ax.imshow([list(image[i:i + 8]) for i in range(0, 64, 8)], cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(str(int(label)), fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    return fig


# ---- debugging (notebook 06) -----------------------------------------------------
def plot_calls(traces: Any, last: int = 12, ax: Any = None) -> Figure:
    """The call record (notebook 06): ranks top to bottom, calls left to right by sequence
    number, rows where the ranks disagree in red, calls that failed hatched."""
    from .calltable import describe, rows

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




COMMS = ("all_reduce", "all_gather", "reduce_scatter")
COMM_COLOURS = {"all_reduce": "C4", "all_gather": "C9", "reduce_scatter": "C6"}


def plot_timeline(rows: Mapping[int, Sequence[tuple[str, float, float]]],
                  title: str = "") -> Figure:
    """One training step per rank (notebook 04): compute on one lane, communication below it.

    rows maps a rank to (label, start, end) in seconds from the start of its step; labels
    starting with "all_reduce", "all_gather" or "reduce_scatter" (notebook 08) go on the
    communication lane, coloured by kind; "wait" is drawn hatched.
    """
    colours = {"forward": "C0", "backward": "C1", "step": "C2", "wait": "0.85", "sleep": "C3"}
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


def plot_memory(held: Mapping[str, Sequence[Sequence[int]]]) -> Figure:
    """Bytes per rank (notebook 08): for each strategy, one stacked bar per rank of its
    parameters, gradients and optimizer state, as counted from the tensors."""
    parts, colours = ("parameters", "gradients", "moments (Adam)"), ("C0", "C1", "C2")
    fig, axes = plt.subplots(1, len(held), figsize=(7, 2.4), dpi=DPI, sharey=True)
    for ax, (name, ranks) in zip(np.atleast_1d(axes), held.items()):
        bottom = np.zeros(len(ranks))
        for k, (part, colour) in enumerate(zip(parts, colours)):
            kib = np.array([r[k] for r in ranks]) / 1024
            ax.bar(range(len(ranks)), kib, bottom=bottom, color=colour, label=part)
            bottom += kib
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(ranks)), [f"r{r}" for r in range(len(ranks))], fontsize=7)
    np.atleast_1d(axes)[0].set_ylabel("KiB held per rank")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))  # the legend above the panels, not over a bar


def plot_weight_slices(d: int, h: int, world_size: int) -> Figure:
    """Notebook 09: W1 (h x d) cut by rows and W2 (d x h) by columns, one colour per rank."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.6), dpi=DPI, width_ratios=[d, h])
    rows = torch.arange(h) * world_size // h  # the rank holding each hidden unit
    cmap, top = ("tab10", 9) if world_size <= 10 else ("tab20", 19)
    for ax, grid, title in ((axes[0], rows[:, None].expand(h, d), f"W1 ({h} x {d}): rows"),
                            (axes[1], rows[None, :].expand(d, h), f"W2 ({d} x {h}): columns")):
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=top, interpolation="nearest", aspect="auto")
        ax.set_title(f"{title} by rank", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [Rectangle((0, 0), 1, 1, color=plt.get_cmap(cmap)(r / top), label=f"rank {r}")
               for r in range(world_size)]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=min(world_size, 8))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def plot_mesh(groups: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Figure:
    """Notebook 09: a dp x tp mesh; each rank's tensor-parallel partners (its row) and
    data-parallel partners (its column). groups[r] is rank r's (tp ranks, dp ranks)."""
    place = {r: (list(tp).index(r), -list(dp).index(r)) for r, (tp, dp) in enumerate(groups)}
    cols, rows = len(groups[0][0]), len(groups[0][1])
    fig, ax = plt.subplots(figsize=(1.2 + 1.3 * cols, 1.4 + 0.8 * rows), dpi=DPI)
    for r, (tp, dp) in enumerate(groups):
        for partners, colour, label in ((tp, "C0", "tensor parallel"), (dp, "C1", "data parallel")):
            (x0, y0), (x1, y1) = place[partners[0]], place[partners[-1]]
            ax.plot([x0, x1], [y0, y1], color=colour, linewidth=3, label=label if r == 0 else None)
    for r, (x, y) in place.items():
        ax.text(x, y, f"rank {r}", ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white"})
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(-rows + 0.5, 0.5)
    ax.axis("off")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=2)
    fig.tight_layout()
    return fig
