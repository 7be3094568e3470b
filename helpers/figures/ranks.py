"""Per-rank pictures: one row per rank, one coloured cell per value, before and after an
operation (notebooks 01 and 02)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipyparallel as ipp
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .style import DPI, MAX_WIDTH

Row = torch.Tensor | Sequence[torch.Tensor] | None
CELL, GAP = 0.5, 0.12  # inches per cell, and between groups of cells


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
    from ..cluster.px import pull_cpu

    pulled = {label: pull_cpu(view, name) for label, name in panels.items()}
    draw_ranks(pulled, title)
    plt.show()
