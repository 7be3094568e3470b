"""Draw every rank's tensor before and after an operation: one row per rank, one cell per value.

Introduced in notebook 01 (a ring exchange), used for every collective in notebook 02. The
pictures are drawn from the real tensors, pulled from the engines with ``pull_cpu`` (CPU
copies, so that a notebook on a GPU machine never has to open CUDA in the client). A row
may hold a tensor, a list of tensors (drawn as groups with a gap between them, e.g. the
output list of ``all_gather``) or ``None`` (the rank has nothing, e.g. a non-root rank's
``gather_list``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipyparallel as ipp
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator

from .bench import format_bytes

Row = torch.Tensor | Sequence[torch.Tensor] | None
CELL, GAP = 0.5, 0.12  # inches per cell, and between groups of cells


def to_cpu(value: Any) -> Any:
    """A detached CPU copy of a tensor, or of every tensor in a list/tuple (notebook 01)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [to_cpu(v) for v in value]
    return value


def pull_cpu(view: ipp.DirectView, name: str) -> list[Any]:
    """A variable (or expression) from every rank, in rank order, as CPU tensors (notebook 01)."""
    return view.apply_sync(to_cpu, ipp.Reference(name))


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
    ax: Any, rows: Sequence[Row], title: str, norm: Normalize, width: float, labels: bool
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
                ax.text(x + 0.5, r, _label(value), ha="center", va="center", fontsize=8,
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


def draw_ranks(panels: Mapping[str, Sequence[Row]], title: str = "", dpi: int = 80) -> Figure:
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
    fig, axes = plt.subplots(
        1, len(panels), squeeze=False, dpi=dpi, width_ratios=widths,
        figsize=(CELL * sum(widths) + 0.4 * len(panels) + 0.8, 0.4 * n + 0.7),
    )
    for i, (ax, (name, rows), width) in enumerate(zip(axes[0], panels.items(), widths)):
        _draw_panel(ax, rows, name, norm, width, labels=i == 0)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def show_ranks(view: ipp.DirectView, panels: Mapping[str, str], title: str = "") -> None:
    """Pull each named variable from every rank and draw them side by side (notebook 01).

    panels maps a panel's title to the name of a variable (or an expression) on the
    engines, e.g. ``{"before": "before", "after": "t"}``.
    """
    pulled = {label: pull_cpu(view, name) for label, name in panels.items()}
    draw_ranks(pulled, title)
    plt.show()


def plot_bandwidth(
    curves: Mapping[str, Mapping[int, float]],
    title: str,
    reference: str | None = None,
    ylabel: str = "bandwidth (MB/s)",
    dpi: int = 80,
) -> Figure:
    """Bandwidth (bytes/s, shown in MB/s) against message size (bytes), log-log (notebook 02).

    curves maps a label to {size in bytes: bytes/s}; the curve named `reference` (e.g. the
    point-to-point bandwidth) is drawn as a dashed black line.
    """
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=dpi)
    for label, points in curves.items():
        sizes = sorted(points)
        style = {"color": "black", "linestyle": "--"} if label == reference else {"marker": "o"}
        ax.plot(sizes, [points[s] / 1e6 for s in sizes], label=label, markersize=3, **style)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=32))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda b, _: format_bytes(b)))
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
